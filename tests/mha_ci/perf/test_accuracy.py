"""Accuracy baselines (mha_ci.perf.accuracy): what is stored, when it changes, how the perf job
and `perf compare` read it, how the refresh and `mha-ci perf accuracy` write it."""
import copy
import datetime as dt
import json
import subprocess

import pytest

from mha_ci.baselines import accuracy_baseline, perf_baseline
from mha_ci.cli import main
from mha_ci.errors import ConfigError, ExitCode
from mha_ci.executors.base import Executor, PayloadResult
from mha_ci.jobs import perf as perf_kind
from mha_ci.jobs.context import JobContext, RunOptions
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Job
from mha_ci.perf import accuracy
from mha_ci.perf.compare import compare
from mha_ci.refresh import RefreshRefused, refresh
from mha_ci.refresh.core import RefreshPolicy
from mha_ci.perf.request import perf_request, selected_workloads

from perf_builders import doc, entry, gate, numerics  # noqa: E402

CODE = {"attn_fwd": "c0de"}
A, B, C = (f"dense_b{n}_hq8_hk8_sq1024_sk1024_dqk64_dv64_c1" for n in (1, 2, 3))


def _measured(keys, sha="s", code=CODE, skip=(), failed=()) -> dict:
    results = []
    for key in keys:
        e = entry(key, 100.0)
        e["code_objects"] = dict(code)
        if key not in skip:
            e["numerics"] = numerics(sha=sha, error="boom" if key in failed else None)
            e["numerics"]["code_objects"] = dict(code)
            e["numerics"]["seconds"] = 1.5
            e["numerics"]["versus"] = {"side": "base", "commit": "x", "outputs": {}}
        results.append(e)
    return doc(results, subset="pr", arch="sm90", toolchain="triton-3.4",
               versions={"torch": "2.13.0", "triton": "3.4.0"})


def test_the_stored_document_keeps_numerics_without_run_facts():
    stored = accuracy.accuracy_document(_measured([A, B, C]), [A, B])
    assert [r["key"] for r in stored["results"]] == [A, B]
    assert stored["selection"]["subset"] == "pr"
    num = stored["results"][0]["numerics"]
    assert "versus" not in num and "seconds" not in num and num["code_objects"] == CODE


@pytest.mark.parametrize("kw, why", [({"skip": [B]}, f"{B}: measured without numerics"),
                                     ({"failed": [B]}, f"{B}: numerics failed: boom")])
def test_a_measurement_missing_numerics_is_refused_naming_the_shapes(kw, why):
    with pytest.raises(ConfigError, match=why):
        accuracy.accuracy_document(_measured([A, B], **kw), [A, B])
    with pytest.raises(ConfigError, match=f"{C}: not measured"):
        accuracy.accuracy_document(_measured([A, B]), [A, C])


def test_a_new_run_of_the_same_code_changes_nothing():
    old = accuracy.accuracy_document(_measured([A]), [A])
    again = _measured([A])
    again["results"][0]["stats"]["trimmed_mean_us"] = 123.0
    again["results"][0]["numerics"]["seconds"] = 9.0
    assert not accuracy.changed(old, accuracy.accuracy_document(again, [A]))
    assert accuracy.changed(old, accuracy.accuracy_document(_measured([A], sha="t"), [A]))
    assert accuracy.changed(None, old)


def test_folding_into_the_perf_baseline_and_judging_by_the_numerics_own_code():
    baseline = doc([entry(A, 100.0), entry(B, 100.0)], arch="sm90", toolchain="triton-3.4")
    stored = accuracy.accuracy_document(_measured([A]), [A])
    folded = accuracy.with_accuracy(baseline, stored)
    assert "numerics" not in baseline["results"][0]                   # a copy
    assert folded["results"][0]["numerics"]["outputs"] and "numerics" not in folded["results"][1]
    assert accuracy.with_accuracy(baseline, None) is baseline
    policy = gate()
    same = compare(folded, _measured([A]), policy)
    assert same.shapes[0].numerics.class_ == "identical" and not same.gate_failed
    # the stored record ran the candidate's code objects: other bits are non-determinism, red,
    # whatever the timing baseline's code objects say
    other_bits = compare(folded, _measured([A], sha="t"), policy)
    assert other_bits.shapes[0].numerics.class_ == "nondeterministic" and other_bits.gate_failed
    # other code, other bits, the same error: reordered
    moved = compare(folded, _measured([A], sha="t", code={"attn_fwd": "other"}), policy)
    assert moved.shapes[0].numerics.class_ == "reordered" and not moved.gate_failed


class _FakePayload(Executor):
    """Answers the perf payload with a document of its shapes, each with numerics."""

    name = "fake"

    def __init__(self, sha="s", code=CODE):
        self.sha, self.code = sha, code

    def run(self, payload):
        args = payload.args
        shapes = json.loads((payload.out_dir / args[args.index("--shapes") + 1]).read_text())["shapes"]
        assert "--numerics" in args
        d = _measured([s["key"] for s in shapes], sha=self.sha, code=self.code)
        out = payload.out_dir / args[args.index("--out") + 1]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(d))
        return PayloadResult(exit_code=0, provenance={"executor": "fake"})


@pytest.mark.slow   # over a second: out of `make test-fast`
def test_the_perf_job_judges_numbers_against_the_accuracy_baseline(pipeline_root, tmp_path):
    pipeline = load_pipeline(pipeline_root)
    keys = [w.key for w in selected_workloads(pipeline, "pr")]
    base = pipeline_root / perf_baseline("sm90", "triton-3.4")
    base.parent.mkdir(parents=True, exist_ok=True)
    base.write_text(json.dumps(doc([entry(k, 100.0) for k in keys], versions={"torch": "2.13.0", "triton": "3.4.0"})))
    job = Job(kind="perf", arch="sm90", toolchain="triton-3.4")
    ctx = lambda ex, name: JobContext(pipeline, ex, tmp_path / name, RunOptions(perf_subset="pr"))  # noqa: E731
    # no accuracy baseline: the candidate's numbers cannot be judged, and the job says so
    result = perf_kind.run_job(job, ctx(_FakePayload(), "o0"))
    assert result.verdict == "fail" and "numerics not measured" in result.message
    assert result.details["accuracy_baseline"] == f"no {accuracy_baseline('sm90', 'triton-3.4')}"
    stored = pipeline_root / accuracy_baseline("sm90", "triton-3.4")
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps(accuracy.accuracy_document(_measured(keys), keys)))
    assert perf_kind.run_job(job, ctx(_FakePayload(), "o1")).verdict == "pass"
    red = perf_kind.run_job(job, ctx(_FakePayload(sha="t"), "o2"))
    assert red.verdict == "fail" and "nondeterministic" in red.message


@pytest.mark.slow
def test_perf_accuracy_command_writes_checks_and_refuses(pipeline_root, tmp_path, capsys):
    keys = [w.key for w in selected_workloads(load_pipeline(pipeline_root), "pr")]
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps(_measured(keys)))
    root = ["--root", str(pipeline_root)]
    assert main([*root, "perf", "accuracy", str(measured), "--check"]) == ExitCode.GATE_FAILED   # nothing stored yet
    assert main([*root, "perf", "accuracy", str(measured)]) == ExitCode.OK
    stored = json.loads((pipeline_root / accuracy_baseline("sm90", "triton-3.4")).read_text())
    assert [r["key"] for r in stored["results"]] == keys
    assert main([*root, "perf", "accuracy", str(measured), "--check"]) == ExitCode.OK
    partial = _measured(keys, skip=keys[:1])
    measured.write_text(json.dumps(partial))
    assert main([*root, "perf", "accuracy", str(measured)]) == ExitCode.CONFIG_ERROR
    assert f"{keys[0]}: measured without numerics" in capsys.readouterr().err
    other = copy.deepcopy(partial)
    other["provenance"]["toolchain"] = "triton-9"
    measured.write_text(json.dumps(other))
    assert main([*root, "perf", "accuracy", str(measured)]) == ExitCode.CONFIG_ERROR


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
def test_the_refresh_stores_the_accuracy_baseline_or_refuses(pipeline_root, tmp_path):
    _git(pipeline_root, "init", "--quiet", "-b", "main")
    _git(pipeline_root, "add", ".")
    _git(pipeline_root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "init")
    pipeline = load_pipeline(pipeline_root)
    keys = [w.key for w in selected_workloads(pipeline, "full")]
    pr = [w.key for w in selected_workloads(pipeline, "pr")]

    def full(skip=()):
        d = _measured(keys, skip=skip)
        d["selection"] = {"subset": "full", "count": len(keys)}
        d["provenance"].update(gpu="NVIDIA H200", kernel="mha", pins_checked=True, pin_mismatches=[],
                               versions={"torch": "2.13.0+cu130", "triton": "3.4.0"})
        for r in d["results"]:
            r["stats"].update(reps=5, dispatches=40, max_us=110.0, median_us=100.0)
        return d

    policy = RefreshPolicy(max_noise_pct=5.0, gate=gate())
    request = perf_request(pipeline, arch="sm90", toolchains=("triton-3.4",), out_dir=tmp_path, executor=None)
    with pytest.raises(RefreshRefused) as refused:
        refresh(request, lambda arch, tc: full(skip=pr[:2]), out_dir=tmp_path / "o1", policy=policy,
                today=dt.date(2026, 12, 2), allow_unpinned=True)
    assert refused.value.exit_code == ExitCode.GATE_FAILED
    assert any(f"{pr[0]}: measured without numerics" in r for r in refused.value.reasons)
    result = refresh(request, lambda arch, tc: full(), out_dir=tmp_path / "o2", policy=policy,
                     today=dt.date(2026, 12, 2), allow_unpinned=True)
    assert accuracy_baseline("sm90", "triton-3.4") in result.files
    stored = json.loads(_git(pipeline_root, "show", f"{result.branch}:{accuracy_baseline('sm90', 'triton-3.4')}"))
    assert [r["key"] for r in stored["results"]] == pr


@pytest.mark.slow
def test_perf_compare_folds_an_accuracy_baseline_or_ignores_numerics(pipeline_root, tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(doc([entry(A, 100.0)], arch="sm90", toolchain="triton-3.4",
                                   versions={"torch": "2.13.0", "triton": "3.4.0"})))
    cand = tmp_path / "cand.json"
    cand.write_text(json.dumps(_measured([A])))
    stored = tmp_path / "acc.json"
    stored.write_text(json.dumps(accuracy.accuracy_document(_measured([A]), [A])))
    root = ["--root", str(pipeline_root)]
    # a perf baseline alone has no numbers to judge the candidate's by: red, fail closed
    assert main([*root, "perf", "compare", str(base), str(cand)]) == ExitCode.GATE_FAILED
    assert main([*root, "perf", "compare", str(base), str(cand), "--accuracy", str(stored)]) == ExitCode.OK
    assert main([*root, "perf", "compare", str(base), str(cand), "--no-numerics"]) == ExitCode.OK
    cand.write_text(json.dumps(_measured([A], sha="t")))         # the same code, other bits
    assert main([*root, "perf", "compare", str(base), str(cand), "--accuracy", str(stored)]) == ExitCode.GATE_FAILED
