"""`perf measure --against` with numerics, a fake executor standing in for the payloads: both
sides keep their outputs, a third run compares them, its verdicts join the head's results as
`numerics.versus`, and the outputs are deleted whatever happened."""
import pytest

from mha_ci.model.loader import load_pipeline
from mha_ci.perf import measure
from mha_ci.perf.document import load_perf
from mha_ci.perf.request import numerics_apply, perf_request

from ab_sides import AbSides  # noqa: E402


@pytest.fixture
def pipeline(pipeline_root):
    return load_pipeline(pipeline_root)


def _request(pipeline, out_dir, executor, numerics=True):
    return perf_request(pipeline, arch="sm90", toolchains=("triton-3.4",), subset="pr", numerics=numerics,
                        out_dir=out_dir, executor=executor)


def test_against_attaches_versus_to_the_head_and_deletes_the_outputs(pipeline, tmp_path):
    rel = "against"
    fake = AbSides()
    request = _request(pipeline, tmp_path, fake)
    inputs = measure.write_inputs(request, rel)
    count = inputs.count
    docs = measure.measure_against(request, inputs, (fake, fake), ("b" * 40, "h" * 40))
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
    fake = AbSides(compare_fails=True)
    request = _request(pipeline, tmp_path, fake)
    docs = measure.measure_against(request, measure.write_inputs(request, rel), (fake, fake), ("b" * 40, None))
    assert all("versus" not in r["numerics"] for r in docs["head"]["results"])
    assert "comparing the outputs of base and head failed" in capsys.readouterr().err
    assert not (tmp_path / rel / "outputs").exists()


def test_no_numerics_saves_and_compares_nothing(pipeline, tmp_path):
    request = _request(pipeline, tmp_path, None, numerics=False)
    inputs = measure.write_inputs(request, "r")

    class TimeOnly(AbSides):
        def run(self, payload):
            assert "--numerics" not in payload.args and "--save-outputs" not in payload.args
            self.runs.append((payload.module, payload.args))
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError):
        measure.measure_against(request, inputs, (TimeOnly(), TimeOnly()), ("b" * 40, None))


def test_numerics_apply_to_the_mha_kernel_on_a_gpu_only(pipeline):
    assert numerics_apply(pipeline, "sm90", "mha")
    assert not numerics_apply(pipeline, "sm90", "sdpa")
    assert not numerics_apply(pipeline, "interpreter", "mha")


def test_only_the_first_round_precompiles(pipeline, tmp_path, monkeypatch):
    """Both sides of round 1 compile their kernels on several processes first; later rounds find
    them in Triton's cache and start no workers."""
    monkeypatch.delenv("MHA_CI_PRECOMPILE_WORKERS", raising=False)
    assert pipeline.perf.against.rounds == 2
    fake = AbSides()
    request = _request(pipeline, tmp_path, fake)
    measure.measure_against(request, measure.write_inputs(request, "against"), (fake, fake), ("b" * 40, None))
    perf_runs = [args for module, args in fake.runs if module == "perf"]
    by_round = {r: [a for a in perf_runs if any(f"/round{r}/" in x for x in a)] for r in (1, 2)}
    assert len(by_round[1]) == 2 and len(by_round[2]) == 2
    assert all("--precompile-workers" in a for a in by_round[1])
    assert not any("--precompile-workers" in a for a in by_round[2])
