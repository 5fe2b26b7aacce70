"""The GPU payload's logic without a GPU: imports, shape selection, timing loop, planted slowdown,
and (where torch is importable) a whole run on the CPU with torch SDPA as the kernel."""
import gc
import json
import os
import statistics
import subprocess
import time
import weakref
from pathlib import Path

import pytest

from mha_ci.payloads import perf as payload
from mha_ci.perf.document import check_perf, perf_from_dump
from mha_ci.perf.stats import Method
from mha_ci.perf.workloads import shapes_document

SRC = Path(__file__).resolve().parents[3] / "src"


def test_chunks_are_strided_and_cover_everything_once():
    entries = [{"key": f"k{i}"} for i in range(10)]
    chunks = [payload.select(entries, f"{i}/3", None) for i in (1, 2, 3)]
    assert [e["key"] for e in chunks[0]] == ["k0", "k3", "k6", "k9"]
    assert sorted(e["key"] for c in chunks for e in c) == sorted(e["key"] for e in entries)
    assert [e["key"] for e in payload.select(entries, None, "k1,k9?")] == ["k1"]


def test_planted_slowdown_env(monkeypatch):
    monkeypatch.setenv("MHA_PERF_PLANT_SLOWDOWN", "5")
    assert payload.planted("dense_b1_x") == 5.0
    monkeypatch.setenv("MHA_PERF_PLANT_KEYS", "varlen_*")
    assert payload.planted("dense_b1_x") == 0.0 and payload.planted("varlen_b1_x") == 5.0


class _NoTorch:
    """measure_shape only touches torch.cuda when it exists."""


def test_measure_shape_times_every_dispatch_and_plants_slowdown():
    def call():
        until = time.perf_counter() + 200e-6
        while time.perf_counter() < until:
            pass

    method = Method(warmup=3, dispatches=20, reps=3, max_seconds_per_shape=10.0, min_dispatches=10)
    reps, facts = payload.measure_shape(_NoTorch(), payload.WallTimer(), call, method, plant_pct=0.0)
    assert len(reps) == 3 and all(len(r) == 20 for r in reps)
    assert 150 < statistics.median(t for r in reps for t in r) < 2000
    planted, pfacts = payload.measure_shape(_NoTorch(), payload.WallTimer(), call, method, plant_pct=50.0)
    # the spin is the planted amount less the timer's fixed cost of an extra spin (none on the CPU)
    assert pfacts["planted_gap_us"] == 0.0
    # ... of the pilot rep's median dispatch
    assert pfacts["planted_us"] == pytest.approx(pfacts["planted_base_us"] * 0.5, abs=2e-3)
    assert 150 < pfacts["planted_base_us"] < 2000
    assert statistics.median(t for r in planted for t in r) > statistics.median(t for r in reps for t in r) * 1.2



def test_a_planted_shape_keeps_its_spin_when_the_fixed_cost_exceeds_the_plant():
    """Run 5 sized the spin to nothing on shapes whose 5 % was below the fixed cost: they ran
    unplanted while calibrate counted them as planted. Now they overshoot instead."""
    class CostlySpin(payload.WallTimer):
        spin_cost_us = 1e6

        def __init__(self):
            self.planted = []

        def rep(self, fn, n, hold_us, plant_us):
            self.planted.append(plant_us)
            return super().rep(fn, n, hold_us, plant_us)

    timer = CostlySpin()
    method = Method(warmup=2, dispatches=10, reps=2, max_seconds_per_shape=10.0, min_dispatches=10)
    _, facts = payload.measure_shape(_NoTorch(), timer, lambda: None, method, plant_pct=5.0)
    assert facts["planted_gap_us"] == 1e6
    assert timer.planted[0] == 0.0                                  # the unplanted pilot rep
    assert timer.planted[1:] == [payload.MIN_PLANT_US] * 2 and payload.MIN_PLANT_US > 0


def test_relayout_gives_every_rep_after_the_first_a_fresh_call_and_warms_it():
    made, ran = [], []

    def call_of(tag):
        return lambda: ran.append(tag)

    def relayout(rep):
        made.append(rep)
        return call_of(rep)

    method = Method(warmup=2, dispatches=10, reps=4, max_seconds_per_shape=10.0, min_dispatches=10, relayout=True)
    reps, _ = payload.measure_shape(_NoTorch(), payload.WallTimer(), call_of(0), method, 0.0, relayout=relayout)
    assert made == [1, 2, 3] and len(reps) == 4
    # each fresh call runs its untimed warm-up, then its rep of 10 timed dispatches
    for rep in (1, 2, 3):
        assert ran.count(rep) == payload.RELAYOUT_WARMUP + 10


def test_relayout_makes_the_next_inputs_after_the_last_ones_are_let_go():
    """An H200 refresh ran out of memory on dense_b64_hq128_hk128_sq1_sk8192_dqk192_dv128_c1 (40 GiB
    of inputs, 48 GiB more while one is made in float32): the measure held the last rep's call,
    and with it its inputs, while relayout made the next."""
    class Call:
        def __call__(self):
            pass

    last = []
    alive_when_relayout_ran = []

    def fresh():
        call = Call()
        last[:] = [weakref.ref(call)]
        return call

    def relayout(rep):
        gc.collect()
        alive_when_relayout_ran.append(last[0]() is not None)
        return fresh()

    method = Method(warmup=1, dispatches=10, reps=3, max_seconds_per_shape=10.0, min_dispatches=10, relayout=True)
    payload.measure_shape(_NoTorch(), payload.WallTimer(), fresh(), method, 0.0, relayout=relayout)
    assert alive_when_relayout_ran == [False, False]


def test_pads_are_seeded_varied_and_whole_grains():
    pads = [payload.pad_bytes(1234, 7, rep) for rep in range(1, 6)]
    assert pads == [payload.pad_bytes(1234, 7, rep) for rep in range(1, 6)]     # both sides, every run
    assert len(set(pads)) == len(pads)
    assert all(p % payload.PAD_GRAIN_BYTES == 0 and 0 < p <= payload.PAD_MAX_GRAINS * payload.PAD_GRAIN_BYTES
               for p in pads)
    assert payload.pad_bytes(1234, 8, 1) != payload.pad_bytes(1234, 7, 1)


@pytest.mark.slow
@pytest.mark.parametrize("relayout,precompile", [(False, 0), (True, 2)])
def test_whole_payload_on_cpu_with_sdpa(tmp_path, torch_python, relayout, precompile):
    python = torch_python
    from mha_ci.perf.buckets import bucket_of
    from mha_ci.perf.shapes import Shape
    from mha_ci.perf.workloads import Origin, Workload

    shapes = [Shape("dense", 2, 4, 2, 64, 64, 32, 32, True), Shape("varlen", 2, 4, 4, 32, 64, 48, 32, False),
              Shape("dense", 1, 2, 1, 1, 128, 16, 16, True),
              Shape("varlen", 2, 4, 2, 32, 32, 32, 32, True).with_pass("bwd")]    # the backward step
    workloads = [Workload(s, bucket_of(s), [Origin("test")]) for s in shapes]
    (tmp_path / "shapes.json").write_text(json.dumps(shapes_document(workloads, "custom")))
    (tmp_path / "method.json").write_text(json.dumps(Method(warmup=2, dispatches=12, reps=3,
                                                            relayout=relayout).to_dict()))
    env = dict(os.environ, PYTHONPATH=str(SRC), MHA_CI_OUT=str(tmp_path), MHA_PERF_PLANT_SLOWDOWN="0")
    env.pop("MHA_CI_PINS", None)
    done = subprocess.run([python, "-m", "mha_ci.payloads.perf", "--shapes", "shapes.json", "--method", "method.json",
                           "--out", "perf.json", "--kernel", "sdpa", "--device", "cpu", "--toolchain", "test",
                           "--dump-dispatches", "d.json", "--precompile-workers", str(precompile)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert ("perf payload: precompiled 4 shapes on 2 processes" in done.stderr) is (precompile == 2)
    doc = json.loads((tmp_path / "perf.json").read_text())
    assert check_perf(doc) is None
    assert [r["key"] for r in doc["results"]] == [w.key for w in workloads]
    assert all(r["error"] is None and r["stats"]["reps"] == 3 for r in doc["results"])
    assert doc["provenance"]["kernel"] == "sdpa" and doc["provenance"]["pins_checked"] is False
    assert doc["method"]["relayout"] is relayout
    assert "4/4 shapes measured" in done.stderr
    # the dump reproduces the document's stats with the orchestrating side's code
    again = perf_from_dump(json.loads((tmp_path / "d.json").read_text()))
    assert [r["stats"] for r in again["results"]] == [r["stats"] for r in doc["results"]]


def test_launch_recorder_times_an_mha_that_predates_the_observers(monkeypatch):
    """A bisect build or an --against base may be older than mha.launch.LAUNCH_OBSERVERS: the
    recorder must let it run (recording nothing) rather than fail the payload."""
    import sys
    import types

    from mha_ci.payloads.perf import LaunchRecorder

    old_launch = types.ModuleType("mha.launch")
    monkeypatch.setitem(sys.modules, "mha", types.ModuleType("mha"))
    monkeypatch.setitem(sys.modules, "mha.launch", old_launch)
    with LaunchRecorder() as recorder:
        pass
    assert recorder.hashes == {}

    new_launch = types.ModuleType("mha.launch")
    new_launch.LAUNCH_OBSERVERS = []
    monkeypatch.setitem(sys.modules, "mha.launch", new_launch)
    with LaunchRecorder() as recorder:
        assert new_launch.LAUNCH_OBSERVERS == [recorder]
    assert new_launch.LAUNCH_OBSERVERS == []


def test_launch_recorder_names_the_outputs_the_package_declares_unordered(monkeypatch):
    """The numerics record's `unordered_outputs` come from the package's own declaration, for
    every kernel launched (the interpreter's too, which have no code object); a package without
    the declaration declares none."""
    import sys
    import types

    from mha_ci.payloads.perf import LaunchRecorder

    launch = types.ModuleType("mha.launch")
    launch.LAUNCH_OBSERVERS = []
    launch.unordered_outputs = lambda names: sorted({"dq"} if "bwd_dkdv_dq" in names else set())
    monkeypatch.setitem(sys.modules, "mha", types.ModuleType("mha"))
    monkeypatch.setitem(sys.modules, "mha.launch", launch)
    spec = lambda name: types.SimpleNamespace(name=name)   # noqa: E731
    with LaunchRecorder() as single_pass:
        for name in ("bwd_preprocess", "bwd_dkdv_dq"):
            for observer in launch.LAUNCH_OBSERVERS:
                observer(spec(name), object())          # no code object: the interpreter
    assert single_pass.hashes == {} and single_pass.unordered_outputs() == ["dq"]
    with LaunchRecorder() as two_kernels:
        for observer in launch.LAUNCH_OBSERVERS:
            observer(spec("bwd_dkdv"), object())
    assert two_kernels.unordered_outputs() == []
    del launch.unordered_outputs                        # an older package
    assert single_pass.unordered_outputs() == []


def test_precompile_deals_shapes_round_robin_to_workers():
    from mha_ci.payloads import perf_precompile as pre

    assert pre.shares(5, 2) == [[0, 2, 4], [1, 3]]
    assert pre.shares(2, 8) == [[0], [1]]          # no empty worker
    assert pre.shares(0, 4) == []


def test_a_failing_precompile_worker_is_reported_not_raised(tmp_path, monkeypatch):
    """A worker that cannot make its shapes' calls (here: no such shapes file) costs time only."""
    from mha_ci.payloads import perf_precompile as pre

    monkeypatch.setenv("PYTHONPATH", str(SRC))
    done = pre.precompile(str(tmp_path / "missing.json"), [0, 1, 2], 2, "sdpa", "cpu", timeout_s=120)
    assert done["shapes"] == 3 and done["workers"] == 2 and len(done["failed"]) == 2
    assert all("exited" in why for why in done["failed"]) and done["left_out"] == []


def test_shapes_a_worker_left_for_memory_are_reported():
    """A worker that leaves shapes to the timing process exits 0; the run still says which."""
    from mha_ci.payloads import perf_precompile as pre

    err = (f"{pre.NOTE}dense_b64_hq128_hk128_sq1_sk8192_dqk192_dv128_c1{pre.LEFT_FOR_MEMORY}\n"
           f"{pre.NOTE}dense_b1_hq8_hk8_sq128_sk128_dqk64_dv64_c0: OutOfMemoryError: CUDA out of memory\n"
           "a warning from somewhere else\n")
    assert pre.shapes_left_out(err) == ["dense_b64_hq128_hk128_sq1_sk8192_dqk192_dv128_c1"]
    assert pre.shapes_left_out("") == []


def test_precompile_leaves_a_shape_too_big_for_the_free_memory_to_the_timing_process():
    from mha_ci.payloads import perf_precompile as pre

    decode = {"batch": 64, "sq": 1, "sk": 8192, "hq": 64, "hk": 64, "dqk": 192, "dv": 128, "dtype": "bf16"}
    # k alone: 64 x 8192 x 64 x 192 elements, made in float32 first (the 24 GiB an H200 worker asked for)
    assert pre.footprint_bytes(decode) > 64 * 8192 * 64 * 192 * 4
    assert not pre.fits(decode, free_bytes=20 * 2**30) and pre.fits(decode, free_bytes=120 * 2**30)
    small = {"batch": 2, "sq": 64, "sk": 64, "hq": 4, "hk": 2, "dqk": 32, "dv": 32, "dtype": "bf16"}
    assert pre.footprint_bytes({**small, "pass": "bwd"}) > pre.footprint_bytes(small)
    assert pre.fits(small, free_bytes=2**30)
