"""How many programs the Gluon forward launches: one per SM (persistent), or one per tile.

Program p walks tiles p, p + P, ... of the launch order (mha.kernels.forward_gluon._tile); at one
program per tile mha.launch launches the kernel's form without that walk (ONE_TILE). A persistent
grid hides each tile's Q load and epilogue behind the next tile's work, but it fixes which program
gets which tile. A grid of one program per tile leaves that to the GPU, which starts the next
program on whichever SM frees first. Equal tiles (non-causal) come out even either way, so they
always run persistent. Causal tiles differ in length, and a static stride can pile the long ones
onto a few programs; this module models both schedules in units of key blocks and keeps the
persistent grid only where its longest program is within IMBALANCE_LIMIT of what the GPU's own
scheduling achieves.

Pure Python (no torch), so the policy is tested on any machine; the measurements that set its two
limits are in docs/configs.md.
"""
from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

# Forces the grid's size for tests and diagnosis (forward_gluon.programs): a number of programs,
# or "tiles" for one per tile.
PROGRAMS_ENV = "MHA_GLUON_PROGRAMS"
# Longest program of the static stride over that of the GPU's scheduling, above which a causal
# problem gets one program per tile: measured regressions started at 1.12 and gains ended at 1.09.
IMBALANCE_LIMIT = 1.10
# The slice-grouped causal order (the split head dim's, forward_gluon.PE_HEAD_GROUP) keeps the
# programs in flight on a few slices' K/V in L2; programs walking long slices with a static stride
# drift apart and lose that, however even their loads. Measured: 8 tiles per slice gained, 64 lost.
GROUPED_MAX_TILES_PER_SLICE = 8
# Above this many tiles a program walks >= 100 of them and the stride's imbalance stays small (in
# the grouped order only slices of at most 8 tiles get this far); modelling them would cost the
# first call more than it could save.
MODELLED_TILES = 16384


@dataclass(frozen=True)
class Problem:
    """A forward launch as the schedule sees it: `slices` (batch x query heads) of
    `tiles_per_slice` query tiles of `block_m` rows against `seqlen_k` keys in blocks of
    `block_n`."""
    slices: int
    tiles_per_slice: int
    seqlen_q: int
    seqlen_k: int
    causal: bool
    head_group: int     # > 0: the slice-grouped causal order
    block_m: int
    block_n: int

    @property
    def tiles(self) -> int:
        return self.slices * self.tiles_per_slice


def tile_rows(problem: Problem) -> list[int]:
    """The query tile index of each tile in launch order (as forward_gluon._tile walks them)."""
    n, s, group = problem.tiles_per_slice, problem.slices, problem.head_group
    if not problem.causal:
        return [t % n for t in range(problem.tiles)]
    rows = []
    for t in range(problem.tiles):
        if group > 0:
            first = t // (group * n) * group
            rows.append(n - 1 - (t - first * n) // min(s - first, group))
        else:
            rows.append(n - 1 - t // s)
    return rows


def tile_work(problem: Problem, row: int) -> int:
    """Key blocks that query tile `row` reads, plus one for its Q load and epilogue."""
    if not problem.causal:
        return math.ceil(problem.seqlen_k / problem.block_n) + 1
    last_key = problem.seqlen_k - problem.seqlen_q + (row + 1) * problem.block_m   # bottom-right diagonal
    return math.ceil(max(0, min(problem.seqlen_k, last_key)) / problem.block_n) + 1


def static_longest(work: list[int], programs: int) -> int:
    """The longest program's work when program p takes tiles p, p + programs, ..."""
    return max(sum(work[p::programs]) for p in range(programs))


def dynamic_longest(work: list[int], programs: int) -> int:
    """The longest SM's work when each tile starts, in order, on the SM that frees first."""
    free = [0] * programs
    for w in work:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


def imbalance(problem: Problem, programs: int) -> float:
    """static_longest / dynamic_longest for the problem's tiles on `programs` programs."""
    work = [tile_work(problem, row) for row in tile_rows(problem)]
    return static_longest(work, programs) / dynamic_longest(work, programs)


def forced_programs(value: str, tiles: int) -> int:
    """The grid size PROGRAMS_ENV asks for: "tiles" (one program per tile) or a positive number
    of programs, at most one per tile. Anything else is refused, naming the variable."""
    if value == "tiles":
        return tiles
    try:
        programs = int(value)
    except ValueError:
        programs = 0
    if programs < 1:
        raise ValueError(f"{PROGRAMS_ENV}={value!r}: expected 'tiles' or a positive number of programs")
    return min(tiles, programs)


@functools.lru_cache(maxsize=1024)
def grid_size(problem: Problem, sms: int) -> int:
    """Programs to launch: `sms` (each walks tiles), or one per tile where a static stride would
    leave the causal tiles unevenly spread or the grouped order's L2 sharing lost."""
    if problem.tiles <= sms or not problem.causal:
        return min(problem.tiles, sms)
    if problem.head_group > 0 and problem.tiles_per_slice > GROUPED_MAX_TILES_PER_SLICE:
        return problem.tiles
    if problem.tiles > MODELLED_TILES:
        return sms
    return sms if imbalance(problem, sms) <= IMBALANCE_LIMIT else problem.tiles
