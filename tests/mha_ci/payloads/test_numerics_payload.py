"""The numerics payload in a toolchain environment (torch, the Triton interpreter on the CPU):
a perf run with --numerics records digests and float64-reference errors, the saved outputs of
two runs compare as identical, and a changed output shows its distance in ULPs."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from mha_ci.payloads.numerics import key_seed
from mha_ci.perf.buckets import bucket_of
from mha_ci.perf.shapes import Shape
from mha_ci.perf.stats import Method
from mha_ci.perf.workloads import Origin, Workload, shapes_document

SRC = Path(__file__).resolve().parents[3] / "src"
pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(SRC), MHA_CI_OUT=str(tmp_path), TRITON_INTERPRET="1")
    env.pop("MHA_CI_PINS", None)
    return env


def _run(python: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, *args], env=_env(tmp_path), capture_output=True, text=True, timeout=900)


def test_key_seed_is_stable_and_spread():
    assert key_seed("dense_b1_x") == key_seed("dense_b1_x")
    assert len({key_seed(f"k{i}") for i in range(100)}) == 100
    assert all(0 <= key_seed(f"k{i}") < 2**31 - 1 for i in range(100))


def test_perf_run_with_numerics_then_base_against_head(tmp_path, torch_python):
    shapes = [Shape("dense", 2, 4, 2, 40, 72, 32, 32, True, dtype="fp16"),                     # GQA, partial tiles
              Shape("varlen", 2, 2, 1, 33, 47, 16, 16, False, sink=True, dtype="fp16").with_pass("bwd")]
    workloads = [Workload(s, bucket_of(s), [Origin("test")]) for s in shapes]
    (tmp_path / "shapes.json").write_text(json.dumps(shapes_document(workloads, "custom")))
    method = Method(warmup=1, dispatches=2, reps=2, min_dispatches=1, max_seconds_per_shape=30.0)
    (tmp_path / "method.json").write_text(json.dumps(method.to_dict()))
    for side in ("base", "head"):
        done = _run(torch_python, tmp_path, "-m", "mha_ci.payloads.perf", "--shapes", "shapes.json",
                    "--method", "method.json", "--out", f"perf-{side}.json", "--device", "cpu", "--toolchain", "test",
                    "--numerics", "--save-outputs", f"outputs/{side}")
        assert done.returncode == 0, done.stderr[-3000:]
    docs = {side: json.loads((tmp_path / f"perf-{side}.json").read_text()) for side in ("base", "head")}
    fwd, bwd = docs["head"]["results"]
    assert set(fwd["numerics"]["outputs"]) == {"out", "lse"}
    assert set(bwd["numerics"]["outputs"]) == {"out", "lse", "dq", "dk", "dv", "dsink"}
    for record in (fwd, bwd):
        num = record["numerics"]
        assert num["error"] is None and num["seed"] == key_seed(record["key"])
        for name, err in num["reference"]["errors"].items():
            assert not err["nonfinite_mismatch"], name
            assert 0 < err["max_abs"] <= err["tol_abs"], (record["key"], name, err)
            assert 0 < err["rms_rel"] < 1e-2, (record["key"], name, err)
    # batch 2: dsink sums over both sequences, so the reduced problem cannot judge it
    assert "dsink" not in bwd["numerics"]["reference"]["errors"]
    assert "dsink not judged" in bwd["numerics"]["reference"]["problem"]
    # the same kernel on the same inputs: the same bits, run after run
    for a, b in zip(docs["base"]["results"], docs["head"]["results"]):
        assert a["numerics"]["outputs"] == b["numerics"]["outputs"]

    done = _run(torch_python, tmp_path, "-m", "mha_ci.payloads.numerics", "--base", "outputs/base",
                "--head", "outputs/head", "--out", "versus.json", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    versus = json.loads((tmp_path / "versus.json").read_text())
    assert set(versus) == {fwd["key"], bwd["key"]}
    assert all(v["identical"] and v["max_ulp"] == 0 and v["differing"] == 0
               for outputs in versus.values() for v in outputs.values())


ULP_SCRIPT = r"""
import json, torch
from mha_ci.payloads.numerics import versus
a = torch.tensor([1.0, -2.0, 0.0, 3.5, float("-inf")], dtype=torch.bfloat16)
one = a.clone(); one.view(torch.int16)[0] += 1                  # next bf16 above 1.0
three = a.clone(); three.view(torch.int16)[3] -= 3
zero = a.clone(); zero[2] = -0.0                                # -0 and +0: other bits, no distance
cross = torch.tensor([1e-40], dtype=torch.float32)              # a subnormal and its negative
lse = torch.tensor([0.5, 2.0], dtype=torch.float32); lse2 = lse.clone(); lse2.view(torch.int32)[1] += 7
inf = a.clone(); inf[0] = float("inf")
print(json.dumps({"same": versus(torch, a, a.clone()), "one": versus(torch, a, one),
                  "three": versus(torch, a, three), "zero": versus(torch, a, zero),
                  "cross": versus(torch, cross, -cross), "fp32": versus(torch, lse, lse2),
                  "inf": versus(torch, a, inf)}))
"""


def test_ulp_distance(tmp_path, torch_python):
    done = _run(torch_python, tmp_path, "-c", ULP_SCRIPT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["same"] == {"identical": True, "max_ulp": 0, "differing": 0, "numel": 5}
    assert got["one"]["max_ulp"] == 1 and got["one"]["differing"] == 1 and not got["one"]["identical"]
    assert got["three"]["max_ulp"] == 3
    assert got["zero"]["max_ulp"] == 0 and got["zero"]["differing"] == 1 and not got["zero"]["identical"]
    bits = 0x7FFFFFFF & int.from_bytes(__import__("struct").pack("<f", 1e-40), "little")
    assert got["cross"]["max_ulp"] == 2 * bits
    assert got["fp32"]["max_ulp"] == 7
    assert got["inf"]["max_ulp"] is None and got["inf"]["differing"] == 1
