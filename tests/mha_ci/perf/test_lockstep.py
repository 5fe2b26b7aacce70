"""Per-shape interleaving of two payload processes (mha_ci.perf.lockstep): the schedule, the
turn-taking between real threads and processes, and what happens when a side goes away."""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mha_ci.perf import lockstep
from mha_ci.perf.document import check_perf

SRC = Path(__file__).resolve().parents[3] / "src"


def test_schedule_is_abba_per_shape_and_covers_every_step_once():
    assert lockstep.order(3) == [("a", None), ("b", None), ("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    for shapes in (0, 1, 2, 7):
        both = lockstep.steps_of("a", shapes) + lockstep.steps_of("b", shapes)
        assert sorted(both) == list(range(2 + 2 * shapes))


def test_bad_spec_and_role_are_refused():
    assert lockstep.parse_spec("out/lock:b") == (Path("out/lock"), "b")
    for spec in ("out/lock", "out/lock:c", ":a"):
        with pytest.raises(ValueError, match="DIR:ROLE"):
            lockstep.parse_spec(spec)
    with pytest.raises(ValueError):
        lockstep.steps_of("c", 1)


def _side(folder, role, shapes, seen, lock_kwargs=None):
    side = lockstep.Lockstep(folder, role, shapes, **(lock_kwargs or {}))
    try:
        for i in range(shapes + 1):
            side.wait(i)
            seen.append((role, None if i == 0 else i - 1))
            time.sleep(0.003)       # "work": the other side must not slip in meanwhile
            side.done(i)
    finally:
        side.leave()
    return side


def test_two_sides_follow_the_schedule(tmp_path):
    folder = lockstep.prepare(tmp_path / "lock")
    seen: list = []
    threads = [threading.Thread(target=_side, args=(folder, r, 5, seen)) for r in ("b", "a")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == lockstep.order(5)
    logged = [line.split()[1] for line in (folder / "log").read_text().splitlines()]
    assert logged == [role for role, _ in lockstep.order(5)]


def test_an_unprepared_folder_is_made_and_side_a_starts(tmp_path):
    seen: list = []
    threads = [threading.Thread(target=_side, args=(tmp_path / "new" / "lock", r, 2, seen)) for r in ("b", "a")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == lockstep.order(2)


def test_a_side_whose_partner_left_finishes_alone(tmp_path):
    folder = lockstep.prepare(tmp_path / "lock")
    (folder / "gone-b").write_text("1\n")
    seen: list = []
    side = _side(folder, "a", 3, seen)
    assert len(seen) == 4 and side.broken and "partner b left" in side.broken
    assert side.record()["broken"] == side.broken



def test_a_partner_that_hands_over_its_last_turn_and_leaves_is_not_a_break(tmp_path, monkeypatch):
    """The race behind a CI failure (fresh clone, 2026-11-30): b did its last step, handed the
    turn to a and left, all between a's read of the turn and a's look for b's gone-marker. a
    then called the interleaving broken and measured its last shape alone."""
    folder = lockstep.prepare(tmp_path / "lock")
    a = lockstep.Lockstep(folder, "a", shapes=2, poll_s=0.001)
    last = len(a.steps) - 1                      # shape 2 runs b then a: a's last step comes last
    due = a.steps[last]
    real_read = lockstep._read_turn
    reads = []

    def stale_then_real(folder_):
        reads.append(1)
        if len(reads) == 1:                      # a reads the turn while b still holds it ...
            lockstep._write_turn(folder, due)    # ... then b hands it over ...
            (folder / "gone-b").write_text("1\n")   # ... and leaves
            return due - 1
        return real_read(folder_)

    monkeypatch.setattr(lockstep, "_read_turn", stale_then_real)
    assert a.wait(last) is True and a.broken is None

def test_a_silent_partner_is_given_up_after_the_stall_limit(tmp_path):
    folder = lockstep.prepare(tmp_path / "lock")
    side = lockstep.Lockstep(folder, "b", 2, stall_s=0.2)
    t0 = time.monotonic()
    assert side.wait(0) is False and "no turn change" in side.broken
    assert 0.2 <= time.monotonic() - t0 < 5


def test_stop_file_makes_a_waiting_side_quit(tmp_path):
    folder = lockstep.prepare(tmp_path / "lock")
    lockstep.stop(folder)
    with pytest.raises(lockstep.Stopped):
        lockstep.Lockstep(folder, "b", 2).wait(0)
    lockstep.prepare(folder)
    assert not (folder / "stop").exists()


@pytest.mark.slow
def test_two_payload_processes_interleave_per_shape_on_cpu(tmp_path, torch_python):
    """Two real payload processes (torch SDPA on the CPU) take turns shape by shape."""
    from mha_ci.perf.buckets import bucket_of
    from mha_ci.perf.shapes import Shape
    from mha_ci.perf.stats import Method
    from mha_ci.perf.workloads import Origin, Workload, shapes_document

    python = torch_python
    shapes = [Shape("dense", 1, 2, 2, 32 * (i + 1), 32 * (i + 1), 16, 16, bool(i % 2)) for i in range(4)]
    workloads = [Workload(s, bucket_of(s), [Origin("test")]) for s in shapes]
    (tmp_path / "shapes.json").write_text(json.dumps(shapes_document(workloads, "custom")))
    (tmp_path / "method.json").write_text(json.dumps(Method(warmup=2, dispatches=6, reps=2).to_dict()))
    folder = lockstep.prepare(tmp_path / "lock")
    env = dict(os.environ, PYTHONPATH=str(SRC), MHA_CI_OUT=str(tmp_path))
    env.pop("MHA_CI_PINS", None)
    env.pop("MHA_PERF_PLANT_SLOWDOWN", None)
    procs = [subprocess.Popen([python, "-m", "mha_ci.payloads.perf", "--shapes", "shapes.json", "--method",
                               "method.json", "--out", f"perf-{role}.json", "--kernel", "sdpa", "--device", "cpu",
                               "--toolchain", f"side-{role}", "--lockstep", f"lock:{role}"],
                              env=env, stderr=subprocess.PIPE, text=True) for role in ("a", "b")]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    logged = [tuple(line.split()[1:]) for line in (folder / "log").read_text().splitlines()]
    assert logged == [(r, "setup" if i is None else str(i)) for r, i in lockstep.order(4)]
    for role in ("a", "b"):
        doc = json.loads((tmp_path / f"perf-{role}.json").read_text())
        assert check_perf(doc) is None and len(doc["results"]) == 4
        assert doc["selection"]["interleave"] == {**doc["selection"]["interleave"], "mode": "per-shape",
                                                  "role": role, "broken": None}


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_a_partner_killed_without_a_word_is_noticed_by_its_pid(tmp_path):
    folder = lockstep.prepare(tmp_path / "lock")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    (folder / "pid-a").write_text(f"{socket.gethostname()} {dead.pid}\n")
    side = lockstep.Lockstep(folder, "b", 2)
    t0 = time.monotonic()
    assert side.wait(0) is False and "partner a died" in side.broken
    assert time.monotonic() - t0 < 10


@pytest.mark.slow
def test_perf_measure_interleave_runs_both_toolchain_venvs_per_shape(tmp_path):
    """`mha-ci perf measure --interleave` end to end on the CPU: both toolchains' venvs (built or
    reused by the venv executor), taking turns per shape, then compared across toolchains."""
    root = SRC.parent
    done = subprocess.run([sys.executable, "-m", "mha_ci", "--root", str(root), "perf", "measure",
                           "--arch", "interpreter", "--toolchain", "triton-3.4", "--interleave", "triton-3.8",
                           "--kernel", "sdpa", "--subset", "pr", "--shape", "dense_b64_hq4_hk1_sq1_sk1024*",
                           "--shape", "dense_b64_hq8_hk1_sq1_sk1024_dqk64*", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHONPATH": str(SRC)})
    assert done.returncode in (0, 1), done.stderr[-3000:]      # 1: CPU timings may "regress"
    run_dir = tmp_path / "perf-interpreter-triton-3.4-vs-triton-3.8"
    logged = [line.split()[1] for line in (run_dir / "lockstep" / "log").read_text().splitlines()]
    assert logged == ["a", "b", "a", "b", "b", "a"]
    for toolchain, role in (("triton-3.4", "a"), ("triton-3.8", "b")):
        doc = json.loads((run_dir / f"perf-{toolchain}.json").read_text())
        assert doc["provenance"]["versions"]["triton"] == toolchain.split("-")[1] + ".0"
        assert doc["selection"]["interleave"]["role"] == role and doc["selection"]["interleave"]["broken"] is None
    assert "Tally:" in done.stdout and (run_dir / "compare.html").is_file()
