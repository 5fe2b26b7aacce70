"""The perf job kind and interleaving, with a fake executor standing in for the payload."""
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from mha_ci.baselines import perf_baseline
from mha_ci.commands.options import run_options
from mha_ci.errors import ConfigError, EnvironmentProblem
from mha_ci.executors.base import Executor, PayloadResult
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Job
from mha_ci.jobs import perf as perf_kind
from mha_ci.jobs.context import JobContext, RunOptions
from mha_ci.perf import measure
from mha_ci.perf.document import load_perf
from mha_ci.perf.request import perf_request, selected_workloads
from mha_ci.perf.shapes import pass_of_key

from perf_builders import doc, entry, gate  # noqa: E402

PR = RunOptions(perf_subset="pr")


class FakeExecutor(Executor):
    """Answers the perf payload with a document for the shapes it was given, times from `us`."""

    name = "fake"

    def __init__(self, us=lambda key, toolchain: 100.0, exit_code=0):
        self.us, self.exit_code, self.runs = us, exit_code, []

    def run(self, payload):
        args = dict(zip(payload.args[::2], payload.args[1::2]))
        self.runs.append((payload.toolchain.name, args.get("--chunk")))
        if self.exit_code:
            return PayloadResult(exit_code=self.exit_code)
        shapes = json.loads((payload.out_dir / args["--shapes"]).read_text())["shapes"]
        if "--chunk" in args:
            i, n = map(int, args["--chunk"].split("/"))
            shapes = shapes[i - 1::n]
        tc = payload.toolchain.name
        d = doc([entry(s["key"], self.us(s["key"], tc)) for s in shapes], subset=json.loads(
            (payload.out_dir / args["--shapes"]).read_text())["subset"], toolchain=tc,
            versions={"torch": "2.13.0", "triton": payload.toolchain.pins.get("triton")})
        d["selection"]["chunk"] = args.get("--chunk")
        out = payload.out_dir / args["--out"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(d))
        return PayloadResult(exit_code=0, provenance={"executor": "fake"})


@pytest.fixture
def checkout(pipeline_root):
    return pipeline_root


def _baseline(root, keys_us):
    path = root / perf_baseline("sm90", "triton-3.4")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc([entry(k, us) for k, us in keys_us.items()],
                                   versions={"torch": "2.13.0", "triton": "3.4.0"})))


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_perf_job_passes_fails_and_reports(checkout, tmp_path, monkeypatch):
    pipeline = load_pipeline(checkout)
    job = Job(kind="perf", arch="sm90", toolchain="triton-3.4")
    keys = [w.key for w in selected_workloads(load_pipeline(checkout), "pr")]
    # no baseline yet: the job cannot pass
    result = perf_kind.run_job(job, JobContext(pipeline, FakeExecutor(), tmp_path / "o0", PR))
    assert result.verdict == "fail" and "no baseline" in result.message
    _baseline(checkout, {k: 100.0 for k in keys})
    result = perf_kind.run_job(job, JobContext(pipeline, FakeExecutor(), tmp_path / "o1", PR))
    assert result.verdict == "pass" and result.details["summary"]["ok"] == len(keys)
    assert (tmp_path / "o1" / "jobs" / job.id / "compare.html").is_file()
    slow = FakeExecutor(us=lambda key, tc: 150.0 if key == keys[0] else 100.0)
    result = perf_kind.run_job(job, JobContext(pipeline, slow, tmp_path / "o2", PR))
    assert result.verdict == "fail" and result.exit_code == 1 and result.details["regressions"] == [keys[0]]
    # the message and the summary's data name the shape and its delta, not only a count
    assert f"worst: {keys[0]} +50.0 %" in result.message
    moved = result.details["verdict"]["passes"][pass_of_key(keys[0])]["regressions"]
    assert [(s["key"], s["delta_pct"]) for s in moved["shapes"]] == [(keys[0], 50.0)]
    # a NaN or non-positive time is a broken measurement: the job fails, naming shape and reason
    broken = FakeExecutor(us=lambda key, tc: {keys[0]: float("nan"), keys[1]: 0.0}.get(key, 100.0))
    result = perf_kind.run_job(job, JobContext(pipeline, broken, tmp_path / "o3", PR))
    assert result.verdict == "fail" and result.exit_code == 1
    assert result.details["broken"] == [{"key": k, "reason": r} for k, r in sorted(
        [(keys[0], "candidate time is not a number: nan"), (keys[1], "candidate time is not positive: 0.0")])]
    assert f"broken measurement: {min(keys[:2])}" in result.message


def test_payload_environment_problem_is_exit_3(checkout, tmp_path):
    pipeline = load_pipeline(checkout)
    job = Job(kind="perf", arch="sm90", toolchain="triton-3.4")
    with pytest.raises(EnvironmentProblem):
        perf_kind.run_job(job, JobContext(pipeline, FakeExecutor(exit_code=3), tmp_path, PR))


def test_interleave_runs_abba_merges_and_compares(checkout, tmp_path):
    assert measure.interleave_order(3, "a", "b") == [(1, "a"), (1, "b"), (2, "b"), (2, "a"), (3, "a"), (3, "b")]
    fake = FakeExecutor(us=lambda key, tc: 100.0 if tc == "triton-3.4" else 90.0)
    request = perf_request(load_pipeline(checkout), arch="sm90", toolchains=("triton-3.4", "triton-3.8"), subset="pr",
                           out_dir=tmp_path, executor=fake)
    rel = "inter"
    inputs = measure.write_inputs(request, rel)
    count = inputs.count
    docs = measure.measure_interleaved(request, inputs, 4)
    assert [r[0] for r in fake.runs] == ["triton-3.4", "triton-3.8", "triton-3.8", "triton-3.4"] * 2
    for tc in ("triton-3.4", "triton-3.8"):
        merged = load_perf(tmp_path / rel / f"perf-{tc}.json")
        assert len(merged["results"]) == count and merged["provenance"]["chunks"] == 4
        assert "chunk" not in merged["selection"]
    from mha_ci.perf.compare import compare

    c = compare(docs["triton-3.4"], docs["triton-3.8"], gate(), cross_toolchain=True)
    assert c.summary["improvement"] == count


class LockstepFake(FakeExecutor):
    """Plays each side of the turn-taking for real (mha_ci.perf.lockstep) before answering."""

    def __init__(self, fail_toolchain=None, **kw):
        super().__init__(**kw)
        self.fail_toolchain, self.broken = fail_toolchain, {}

    def run(self, payload):
        from mha_ci.perf import lockstep

        args = dict(zip(payload.args[::2], payload.args[1::2]))
        folder, role = lockstep.parse_spec(args["--lockstep"])
        shapes = json.loads((payload.out_dir / args["--shapes"]).read_text())["shapes"]
        side = lockstep.Lockstep(payload.out_dir / folder, role, len(shapes))
        try:
            if payload.toolchain.name == self.fail_toolchain:
                return PayloadResult(exit_code=3)
            for i in range(len(shapes) + 1):
                side.wait(i)
                side.done(i)
        except lockstep.Stopped:
            return PayloadResult(exit_code=4)
        finally:
            side.leave()
            self.broken[role] = side.broken
        return super().run(payload)


def test_lockstep_runs_both_sides_at_once_and_compares(checkout, tmp_path):
    fake = LockstepFake(us=lambda key, tc: 100.0 if tc == "triton-3.4" else 90.0)
    request = perf_request(load_pipeline(checkout), arch="sm90", toolchains=("triton-3.4", "triton-3.8"), subset="pr",
                           out_dir=tmp_path, executor=fake)
    rel = "lock"
    inputs = measure.write_inputs(request, rel)
    count = inputs.count
    docs = measure.measure_lockstep(request, inputs)
    log = (tmp_path / rel / "lockstep" / "log").read_text().splitlines()
    # (the message shows the schedule as it ran, should this ever fail)
    assert len(log) == 2 + 2 * count and [line.split()[1] for line in log[:6]] == list("ababba"), \
        (count, log, fake.broken)
    for tc in docs:
        assert len(load_perf(tmp_path / rel / f"perf-{tc}.json")["results"]) == count
    with pytest.raises(ConfigError):
        measure.measure_lockstep(replace(request, toolchains=("triton-3.4", "triton-3.4")), inputs)


def test_lockstep_failure_of_one_side_stops_the_other(checkout, tmp_path):
    fake = LockstepFake(fail_toolchain="triton-3.8")
    request = perf_request(load_pipeline(checkout), arch="sm90", toolchains=("triton-3.4", "triton-3.8"), subset="pr",
                           out_dir=tmp_path, executor=fake)
    inputs = measure.write_inputs(request, "lock")
    with pytest.raises(EnvironmentProblem):
        measure.measure_lockstep(request, inputs)


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_repeat_runs_separate_processes_and_combines_them(checkout, tmp_path, monkeypatch):
    pipeline = load_pipeline(checkout)
    keys = [w.key for w in selected_workloads(load_pipeline(checkout), "pr")]
    _baseline(checkout, {k: 100.0 for k in keys})
    # the first shape lands on a slow mode in one process of three: the median run is unaffected
    calls = {"n": 0}

    def us(key, tc):
        if key == keys[0]:
            calls["n"] += 1
            return 110.0 if calls["n"] == 2 else 100.0
        return 100.0

    job = Job(kind="perf", arch="sm90", toolchain="triton-3.4")
    result = perf_kind.run_job(job, JobContext(pipeline, FakeExecutor(us=us), tmp_path, replace(PR, perf_repeat=3)))
    assert result.verdict == "pass" and result.details["repeat"] == 3
    doc = load_perf(tmp_path / "jobs" / job.id / "perf.json")
    first = doc["results"][0]["stats"]
    assert first["run_trimmed_means_us"] == [100.0, 110.0, 100.0] and first["trimmed_mean_us"] == 100.0
    assert len(doc["provenance"]["combined_runs"]) == 3
    # CI sets the repeats through the environment; the command line turns it into the option.
    args = SimpleNamespace(select=None, pins="enforce")
    assert run_options(args, {"MHA_CI_PERF_SUBSET": "pr", "MHA_CI_PERF_REPEAT": "3"}) == replace(PR, perf_repeat=3)
    with pytest.raises(ConfigError, match="whole number"):
        run_options(args, {"MHA_CI_PERF_REPEAT": "three"})


def test_the_perf_subset_follows_the_event():
    """A pull request's run (its event, or an A/B against its base) measures the PR subset; a push,
    schedule or manual run the full set; the variable CI may set wins. Seen wrong on the H200: a
    pull request's GPU job measured all 309 shapes on both sides, past 9 minutes."""
    from mha_ci.commands.options import perf_subset

    plain = SimpleNamespace(select=None, pins="enforce")
    assert run_options(plain, {}, event_kind="pull_request").perf_subset == "pr"
    assert run_options(plain, {}, event_kind="push").perf_subset == "full"
    assert run_options(plain, {}, event_kind="schedule").perf_subset == "full"
    assert run_options(plain, {"MHA_CI_PERF_SUBSET": "full"}, event_kind="pull_request").perf_subset == "full"
    assert perf_subset("manual", "main", {}) == "pr"
    assert perf_subset("manual", None, {}) == "full"
    with pytest.raises(ConfigError, match="unknown subset"):
        run_options(plain, {"MHA_CI_PERF_SUBSET": "most"}, event_kind="push")


def test_every_exported_gpu_run_names_its_event(repo_root):
    """The GPU jobs' `mha-ci run` gets the event of its workflow, so the perf job measures the
    shapes that event asks for (pull request: the subset; main and nightly: the full set)."""
    wanted = {"pr-gpu.yml": "--event pull_request --gate-from /base --perf-against /base",
              "main.yml": "--event push", "nightly.yml": "--event manual"}
    for name, options in wanted.items():
        text = (repo_root / ".github" / "workflows" / name).read_text()
        runs = [line for line in text.splitlines() if 'bash -c "$IN_IMAGE" mha-ci' in line]
        assert runs and all(line.rstrip().endswith(f"mha-ci {options}") for line in runs), name
