"""`perf measure --against` with numerics, a fake executor standing in for the payloads: both
sides keep their outputs, a third run compares them, its verdicts join the head's results as
`numerics.versus`, and the outputs are deleted whatever happened."""
import json

import pytest

from mha_ci.executors.base import Executor, PayloadResult
from mha_ci.model.loader import load_pipeline
from mha_ci.perf import lockstep, measure
from mha_ci.perf.document import load_perf

from perf_builders import doc, entry  # noqa: E402


def _numerics(key: str) -> dict:
    return {"seed": 1, "error": None, "outputs": {"out": {"sha256": "ab", "dtype": "bf16", "numel": 4}},
            "reference": {"problem": "p", "errors": {"out": {"max_abs": 1e-3, "rms_rel": 2e-3, "tol_abs": 1e-2,
                                                               "lowp_max_abs": 5e-3, "nonfinite_mismatch": False}}}}


class SidesFake(Executor):
    """Plays both payloads' turns (mha_ci.perf.lockstep), writes a document with numerics and a
    saved output per shape; answers the numerics payload with `versus` (or fails it)."""

    name = "fake"

    def __init__(self, compare_fails: bool = False):
        self.compare_fails, self.runs = compare_fails, []

    def run(self, payload):
        self.runs.append((payload.module, payload.args))
        args = payload.args
        value = lambda flag: args[args.index(flag) + 1]  # noqa: E731
        if payload.module == "numerics":
            assert (payload.out_dir / value("--base")).is_dir() and (payload.out_dir / value("--head")).is_dir()
            if self.compare_fails:
                return PayloadResult(exit_code=4)
            keys = [p.stem for p in (payload.out_dir / value("--head")).glob("*.pt")]
            versus = {k: {"out": {"identical": True, "max_ulp": 0, "differing": 0, "numel": 4}} for k in keys}
            (payload.out_dir / value("--out")).write_text(json.dumps(versus))
            return PayloadResult(exit_code=0)
        assert "--numerics" in args
        shapes = json.loads((payload.out_dir / value("--shapes")).read_text())["shapes"]
        folder, role = lockstep.parse_spec(value("--lockstep"))
        side = lockstep.Lockstep(payload.out_dir / folder, role, len(shapes))
        saved = payload.out_dir / value("--save-outputs")
        saved.mkdir(parents=True, exist_ok=True)
        try:
            for i in range(len(shapes) + 1):
                side.wait(i)
                if i:
                    (saved / f"{shapes[i - 1]['key']}.pt").write_bytes(b"tensors")
                side.done(i)
        finally:
            side.leave()
        results = []
        for s in shapes:
            e = entry(s["key"], 100.0)
            e["numerics"] = _numerics(s["key"])
            results.append(e)
        d = doc(results, subset="pr", toolchain=payload.toolchain.name,
                versions={"torch": "2.13.0", "triton": payload.toolchain.pins.get("triton")})
        out = payload.out_dir / value("--out")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(d))
        return PayloadResult(exit_code=0, provenance={"executor": "fake"})


@pytest.fixture
def pipeline(pipeline_root):
    return load_pipeline(pipeline_root)


def test_against_attaches_versus_to_the_head_and_deletes_the_outputs(pipeline, tmp_path):
    rel = "against"
    _, _, count = measure.write_inputs(pipeline, tmp_path / rel, "pr")
    fake = SidesFake()
    docs = measure.measure_against((fake, fake), ("b" * 40, "h" * 40), pipeline, "triton-3.4", "sm90", tmp_path, rel)
    assert [m for m, _ in fake.runs].count("numerics") == 1
    head = load_perf(tmp_path / rel / "perf-head.json")
    assert len(head["results"]) == count
    for record in head["results"] + docs["head"]["results"]:
        versus = record["numerics"]["versus"]
        assert versus["commit"] == "b" * 40 and versus["outputs"]["out"]["identical"] is True
    assert all("versus" not in r["numerics"] for r in docs["base"]["results"])
    assert not (tmp_path / rel / "outputs").exists()


def test_a_failed_comparison_leaves_the_head_without_versus(pipeline, tmp_path, capsys):
    rel = "against"
    measure.write_inputs(pipeline, tmp_path / rel, "pr")
    fake = SidesFake(compare_fails=True)
    docs = measure.measure_against((fake, fake), ("b" * 40, None), pipeline, "triton-3.4", "sm90", tmp_path, rel)
    assert all("versus" not in r["numerics"] for r in docs["head"]["results"])
    assert "comparing the outputs of base and head failed" in capsys.readouterr().err
    assert not (tmp_path / rel / "outputs").exists()


def test_no_numerics_saves_and_compares_nothing(pipeline, tmp_path):
    measure.write_inputs(pipeline, tmp_path / "r", "pr")

    class TimeOnly(SidesFake):
        def run(self, payload):
            assert "--numerics" not in payload.args and "--save-outputs" not in payload.args
            self.runs.append((payload.module, payload.args))
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError):
        measure.measure_against((TimeOnly(), TimeOnly()), ("b" * 40, None), pipeline, "triton-3.4", "sm90",
                                tmp_path, "r", numerics=False)


def test_numerics_apply_to_the_mha_kernel_on_a_gpu_only(pipeline):
    assert measure.numerics_apply(pipeline, "sm90", "mha")
    assert not measure.numerics_apply(pipeline, "sm90", "sdpa")
    assert not measure.numerics_apply(pipeline, "interpreter", "mha")
