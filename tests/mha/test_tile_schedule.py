"""The Gluon forward's grid policy (mha.tile_schedule): its schedule model and its choices on the
perf set's shapes whose persistent-grid A/B is in docs/configs.md."""
import pytest

from mha import tile_schedule as ts


def problem(batch, hq, seqlen, causal, head_group=0, seqlen_k=None, block_n=128):
    return ts.Problem(slices=batch * hq, tiles_per_slice=seqlen // 128, seqlen_q=seqlen,
                      seqlen_k=seqlen_k or seqlen, causal=causal, head_group=head_group, block_m=128,
                      block_n=block_n)


def test_the_launch_order_visits_every_tile_once_longest_first():
    for head_group in (0, 4):
        p = problem(3, 2, 1024, True, head_group)   # 6 slices: the last group has 2
        rows = ts.tile_rows(p)
        assert sorted(rows) == sorted(list(range(8)) * 6)
        assert rows[:2] == [7, 7]                   # each order starts on the longest tiles
    assert ts.tile_rows(problem(1, 2, 256, False)) == [0, 1, 0, 1]


def test_tile_work_counts_the_key_blocks_under_the_diagonal():
    p = problem(1, 1, 512, True)
    assert [ts.tile_work(p, row) for row in range(4)] == [2, 3, 4, 5]
    assert ts.tile_work(problem(1, 1, 256, True, seqlen_k=640), 0) == 5 + 1 - 1   # 3 blocks before it
    assert ts.tile_work(problem(1, 1, 512, False), 0) == 5


def test_a_static_stride_against_first_free_scheduling():
    work = [3, 1, 1, 1]
    assert ts.static_longest(work, 2) == 4          # program 0: tiles 0 and 2
    assert ts.dynamic_longest(work, 2) == 3         # tiles 1, 2, 3 go to the other SM
    assert ts.imbalance(problem(1, 4, 8192, True), 132) == pytest.approx(1.49, abs=0.01)


@pytest.mark.parametrize("shape, grid", [
    (problem(4, 32, 4096, False), 132),                     # equal tiles: persistent
    (problem(1, 1, 512, True), 4),                          # no more tiles than SMs
    (problem(1, 4, 8192, True), 256),                       # measured +42 % persistent
    (problem(1, 16, 8192, True), 1024),                     # +6.5 %
    (problem(8, 4, 1024, True), 256),                       # +8.8 %
    (problem(1, 64, 8192, True), 132),                      # -1.5 %
    (problem(8, 48, 1024, True), 132),                      # -17.7 %
    (problem(32, 40, 256, True), 132),                      # -32.1 %
    (problem(1, 128, 8192, True, head_group=4), 8192),      # +12.0 %, balanced: the L2 grouping
    (problem(8, 16, 1024, True, head_group=4), 132),        # -8.1 %
    (problem(64, 128, 8192, True), 132),                    # past the modelled size
    (problem(64, 128, 1024, True, head_group=4), 132),      # the same, slices of 8 tiles
])
def test_the_grid_chosen_for_measured_shapes(shape, grid):
    assert ts.grid_size(shape, 132) == grid


def test_a_forced_grid_takes_tiles_or_a_positive_count_and_names_the_variable_otherwise():
    assert ts.forced_programs("tiles", 96) == 96
    assert ts.forced_programs("3", 96) == 3
    assert ts.forced_programs("500", 96) == 96      # at most one program per tile
    for bad in ("0", "-2", "1.5", "all", " "):
        with pytest.raises(ValueError, match=ts.PROGRAMS_ENV):
            ts.forced_programs(bad, 96)
