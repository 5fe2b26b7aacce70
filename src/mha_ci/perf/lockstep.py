"""Per-shape interleaving of two payload processes on one GPU (golden vs top of tree).

One process cannot hold two Triton versions, so comparing toolchains needs two processes. Run
one after the other, the comparison absorbs whatever the GPU did in between (clocks,
temperature, a neighbour): the drift lands on one side only. Here both processes start
together and take turns shape by shape, in ABBA order per pair of shapes:

    setup A, setup B, shape 0: A B, shape 1: B A, shape 2: A B, ...

so a linear drift cancels between the two sides of every pair of shapes, and no two timed
regions ever overlap on the GPU (a waiting process has synchronised and holds no work).

The turn is one integer in a file of a folder both processes see (the run's out folder, so it
works for venv, host and docker executors alike: no shared PID namespace or pipe is needed).
A process waits for its step, does it, then writes the next step with an atomic rename. It
leaves a `gone-<role>` marker when it exits for any reason; the partner then stops waiting and
finishes alone, and its document says where the interleaving broke. A partner that dies
without a word (a segfault, the OOM killer) is caught by its PID when both sides share a host
and PID namespace (`pid-<role>` holds host name and PID); otherwise it is given `stall_s`
seconds per step before the same happens.
A `stop` file (the coordinator writes it on Ctrl-C) makes both sides quit at their next turn.

Standard library only: this runs inside the toolchain environments.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

ROLES = ("a", "b")
SETUP_STEPS = 2
# Longest one step may take before the waiting side gives up on its partner: a cold compile
# of every kernel variant of a shape plus its timed reps stays well under this.
DEFAULT_STALL_S = 900.0


class Stopped(Exception):
    """The coordinator asked both sides to quit (a `stop` file in the turn folder)."""


def steps_of(role: str, shapes: int) -> list[int]:
    """The global step numbers `role` owns, in order: its setup, then one per shape."""
    if role not in ROLES:
        raise ValueError(f"lockstep role must be one of {ROLES}, not {role!r}")
    first = role == "a"
    steps = [0 if first else 1]
    for n in range(shapes):
        a_first = n % 2 == 0
        base = SETUP_STEPS + 2 * n
        steps.append(base if first == a_first else base + 1)
    return steps


def order(shapes: int) -> list[tuple[str, int | None]]:
    """(role, shape index or None for setup) for every global step: the schedule, readable."""
    owner: dict[int, tuple[str, int | None]] = {}
    for role in ROLES:
        for i, step in enumerate(steps_of(role, shapes)):
            owner[step] = (role, None if i == 0 else i - 1)
    return [owner[s] for s in sorted(owner)]


def parse_spec(spec: str) -> tuple[Path, str]:
    """`DIR:ROLE` from the payload's --lockstep argument."""
    folder, sep, role = spec.rpartition(":")
    if not sep or not folder or role not in ROLES:
        raise ValueError(f"--lockstep {spec!r}: expected DIR:ROLE with ROLE one of {', '.join(ROLES)}")
    return Path(folder), role


def prepare(folder: Path) -> Path:
    """A fresh turn folder (the coordinator calls this before starting both processes)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in [*folder.glob("gone-*"), *folder.glob("pid-*"), folder / "stop", folder / "log"]:
        stale.unlink(missing_ok=True)
    _write_turn(folder, 0)
    return folder


def _write_turn(folder: Path, step: int) -> None:
    tmp = folder / f".turn.{os.getpid()}"
    tmp.write_text(f"{step}\n")
    os.replace(tmp, folder / "turn")


def _read_turn(folder: Path) -> int | None:
    try:
        return int((folder / "turn").read_text())
    except (FileNotFoundError, ValueError):
        return None     # not prepared yet, or caught between write and rename on some filesystems


class Lockstep:
    """One side of the turn-taking. `wait(i)` before step i of this role, `done(i)` after."""

    def __init__(self, folder: Path, role: str, shapes: int, stall_s: float = DEFAULT_STALL_S,
                 poll_s: float = 0.002) -> None:
        self.folder, self.role = Path(folder), role
        self.partner = "b" if role == "a" else "a"
        self.steps = steps_of(role, shapes)
        self.stall_s, self.poll_s = stall_s, poll_s
        self.broken: str | None = None      # why the interleaving stopped, once it has
        self.waited_s = 0.0
        self.host = socket.gethostname()
        self.folder.mkdir(parents=True, exist_ok=True)
        if role == "a" and _read_turn(self.folder) is None:
            _write_turn(self.folder, 0)     # started by hand without prepare(): a owns step 0
        (self.folder / f"pid-{role}").write_text(f"{self.host} {os.getpid()}\n")

    def _partner_dead(self) -> bool:
        """True only when the partner shares our host and PID namespace and its PID is gone."""
        try:
            host, pid = (self.folder / f"pid-{self.partner}").read_text().split()
        except (FileNotFoundError, ValueError):
            return False        # not started yet
        if host != self.host:
            return False        # another container: cannot tell, the stall limit applies
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def wait(self, index: int) -> bool:
        """Block until this role's index-th step is due; False once running alone."""
        if self.broken:
            return False
        step = self.steps[index]
        t0 = last_change = last_check = time.monotonic()
        last = None
        while True:
            if (self.folder / "stop").exists():
                raise Stopped(f"stopped before step {step} of role {self.role}")
            turn = _read_turn(self.folder)
            if turn == step:
                self.waited_s += time.monotonic() - t0
                return True
            if turn is not None and turn > step:
                self.broken = f"turn {turn} passed step {step} of role {self.role}"
                return False
            now = time.monotonic()
            why = None
            if (self.folder / f"gone-{self.partner}").exists():
                why = "left"
            elif now - last_check > 1.0:
                last_check = now
                why = "died" if self._partner_dead() else None
            # A partner whose last step came just before ours hands the turn over and then
            # leaves: if it did both since the turn was read above, the turn is ours now.
            if why and _read_turn(self.folder) != step:
                self.broken = f"partner {self.partner} {why} before step {step}"
                return False
            if turn != last:
                last, last_change = turn, now
            elif now - last_change > self.stall_s:
                self.broken = f"no turn change for {self.stall_s:.0f} s before step {step}"
                return False
            time.sleep(self.poll_s)

    def done(self, index: int) -> None:
        if not self.broken:
            # The log is the schedule as it happened (only the side holding the turn writes).
            with open(self.folder / "log", "a") as log:
                log.write(f"{self.steps[index]} {self.role} {index - 1 if index else 'setup'}\n")
            _write_turn(self.folder, self.steps[index] + 1)

    def leave(self) -> None:
        """Always called on exit: lets the partner stop waiting for us."""
        (self.folder / f"gone-{self.role}").write_text(f"{os.getpid()}\n")

    def record(self) -> dict:
        return {"mode": "per-shape", "role": self.role, "broken": self.broken,
                "waited_s": round(self.waited_s, 1)}


def stop(folder: Path) -> None:
    """Ask both sides to quit at their next turn."""
    Path(folder, "stop").write_text("stop\n")
