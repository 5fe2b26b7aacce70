"""Fault injection: broken inputs, skipped runs and crashes never end in a green gate.

Each case is one line in a table: how to break something, the exit code `mha-ci` must give and
a phrase its output must hold. The rule they hold (issue 13): a missing, failed, NaN or
non-positive measurement fails the gate with a reason per shape; a crash is never reported as a
gate verdict (exit 4, one line, the traceback in a file); an interrupted run says so.
"""
from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode

from perf_builders import doc, entry  # noqa: E402

A = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
B = "dense_b1_hq128_hk8_sq8192_sk8192_dqk128_dv128_c1"
BASE = doc([entry(A, 100.0), entry(B, 1000.0)])


def candidate(**times) -> dict:
    """BASE with some shapes' trimmed means replaced (A=..., B=...); "drop" removes the shape."""
    out = copy.deepcopy(BASE)
    keys = {"A": A, "B": B}
    for name, value in times.items():
        result = next(r for r in out["results"] if r["key"] == keys[name])
        if value == "drop":
            out["results"].remove(result)
        elif value == "failed":
            result.update(stats=None, error="RuntimeError: launch failed")
        else:
            result["stats"]["trimmed_mean_us"] = value
    return out


def with_stats(document: dict, key: str, **stats) -> dict:
    out = copy.deepcopy(document)
    next(r for r in out["results"] if r["key"] == key)["stats"].update(stats)
    return out


# (id, baseline document, candidate document, exit code, phrase in stdout+stderr)
PERF_CASES = [
    ("candidate-nan", BASE, candidate(A=math.nan), 1, "candidate time is not a number: nan"),
    ("candidate-inf", BASE, candidate(A=math.inf), 1, "candidate time is not a number: inf"),
    ("candidate-zero", BASE, candidate(A=0.0), 1, "candidate time is not positive: 0.0"),
    ("candidate-negative", BASE, candidate(B=-5.0), 1, "candidate time is not positive: -5.0"),
    ("candidate-string", BASE, candidate(A="12.5"), 1, "candidate time is not a number: '12.5'"),
    ("candidate-null-time", BASE, candidate(A=None), 1, "candidate time is not a number: None"),
    ("candidate-half-missing", BASE, candidate(B="drop"), 1, f"{B}: not measured in the candidate"),
    ("candidate-all-failed", BASE, candidate(A="failed", B="failed"), 1,
     f"{B}: candidate failed: RuntimeError: launch failed"),
    ("candidate-noise-nan", BASE, with_stats(BASE, A, noise_pct=math.nan), 1, "candidate noise is not a number"),
    ("baseline-nan", candidate(A=math.nan), BASE, 1, "baseline time is not a number: nan"),
    ("baseline-null", candidate(A=None), BASE, 1, "baseline time is not a number: None"),
    ("baseline-string", candidate(B="fast"), BASE, 1, "baseline time is not a number: 'fast'"),
    ("baseline-zero", candidate(A=0), BASE, 1, "baseline time is not positive: 0"),
    ("subset-count-short", BASE, doc([entry(A, 100.0)], subset="pr") | {"selection": {"subset": "pr", "count": 2}},
     1, "counts 1 shape(s) more than its results hold"),
    ("stall-from-max-only", BASE, with_stats(BASE, A, max_us=500_000.0, stall=None), 0,
     "worst 0.50 s against a 100 us median (x5000.0; seen in max_us only)"),
    ("healthy", BASE, candidate(A=101.0), 0, "0 regressions"),
]


@pytest.mark.parametrize("base, cand, code, phrase", [c[1:] for c in PERF_CASES], ids=[c[0] for c in PERF_CASES])
def test_perf_compare_never_passes_a_broken_measurement(tmp_path, repo_root, capsys, base, cand, code, phrase):
    paths = []
    for name, document in (("base.json", base), ("cand.json", cand)):
        (tmp_path / name).write_text(json.dumps(document))     # NaN/Infinity as Python's json writes them
        paths.append(str(tmp_path / name))
    assert main(["--root", str(repo_root), "perf", "compare", *paths]) == code
    captured = capsys.readouterr()
    assert phrase in captured.out + captured.err
    assert "ok       +nan" not in captured.out


# Inputs that used to end in a traceback with exit 1 ("a gate failed"). Each case breaks a copy of
# pipelines/ (root) in tmp_path and returns the arguments after `--root ROOT`.

def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def non_utf8_yaml(root, tmp):
    _write(root / "pipelines" / "jobs.yaml", b"jobs:\n  - name: caf\xe9\n")
    return ["validate"]


def huge_yaml(root, tmp):
    _write(root / "pipelines" / "triggers.yaml", "# padding\n" * 120_000)
    return ["validate"]


def zero_tensor_parallel(root, tmp):
    _replace(root / "pipelines" / "workloads.yaml", "tensor_parallel: [1, 8]", "tensor_parallel: [0, 8]")
    return ["perf", "shapes"]


def zero_prefill_seqlen(root, tmp):
    _replace(root / "pipelines" / "workloads.yaml", "prefill_seqlens: [256,", "prefill_seqlens: [0,")
    return ["perf", "shapes"]


def lock_outside_checkout(root, tmp):
    secret = _write(root.parent / f"{root.name}-secret.lock", "root-password-line\n")   # beside the checkout
    text = (root / "pipelines" / "toolchains.yaml").read_text()
    import re
    (root / "pipelines" / "toolchains.yaml").write_text(re.sub(r"lock: containers/\S+", f"lock: {secret}", text, count=1))
    return ["validate"]


def non_utf8_event(root, tmp):
    return ["plan", "--github-event", str(_write(tmp / "event.json", b'{"pull_request": {"title": "\xff"}}'))]


def label_without_name(root, tmp):
    event = {"pull_request": {"labels": [{"color": "ededed"}], "base": {"ref": "main"}, "draft": False}}
    return ["plan", "--github-event", str(_write(tmp / "event.json", json.dumps(event)))]


def non_utf8_changed_files(root, tmp):
    return ["plan", "--changed-files", str(_write(tmp / "changed.txt", b"src/mha/\xff.py\n"))]


def uppercase_ci_label(root, tmp):
    return ["plan", "--labels", "CI:SM90"]


def out_is_a_file(root, tmp):
    base = _write(tmp / "base.json", json.dumps(BASE))
    return ["perf", "compare", str(base), str(base), "--out", str(_write(tmp / "taken", "x"))]


def out_under_a_file(root, tmp):
    return ["run", "--job", "nothing", "--out", str(_write(tmp / "taken", "x") / "sub")]


def perf_document_is_a_folder(root, tmp):
    base = _write(tmp / "base.json", json.dumps(BASE))
    (tmp / "folder.json").mkdir()
    return ["perf", "compare", str(base), str(tmp / "folder.json")]


def merge_out_is_a_folder(root, tmp):
    base = _write(tmp / "base.json", json.dumps(BASE))
    return ["perf", "merge", str(base), "--out", str(tmp)]


# (case, exit code, phrase in stderr)
USAGE_CASES = [
    (non_utf8_yaml, 2, "jobs.yaml:2: YAML file is not UTF-8 text"),
    (huge_yaml, 2, "more than the 1048576 allowed"),
    (zero_tensor_parallel, 2, "tensor_parallel / 0: Input should be greater than or equal to 1"),
    (zero_prefill_seqlen, 2, "prefill_seqlens / 0: Input should be greater than or equal to 1"),
    (lock_outside_checkout, 2, "is outside the checkout"),
    (non_utf8_event, 2, "GitHub event is not UTF-8 text"),
    (label_without_name, 2, "labels[0]: a label is a string or an object with a string 'name'"),
    (non_utf8_changed_files, 2, "changed-files list is not UTF-8 text"),
    (uppercase_ci_label, 2, "unknown label 'CI:SM90'"),
    (out_is_a_file, 2, "is a file, not a folder"),
    (out_under_a_file, 2, "cannot write there"),
    (perf_document_is_a_folder, 2, "cannot read perf result"),
    (merge_out_is_a_folder, 2, "is a folder; this command writes one file there"),
]


@pytest.mark.parametrize("case, code, phrase", USAGE_CASES, ids=[c[0].__name__ for c in USAGE_CASES])
def test_bad_input_is_a_usage_error_not_a_crash(pipeline_root, tmp_path, capsys, case, code, phrase):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args = case(pipeline_root, scratch)
    assert main(["--root", str(pipeline_root), *args]) == code
    err = capsys.readouterr().err
    assert phrase in err
    assert "Traceback" not in err and "internal error" not in err
    assert "root-password-line" not in err


def test_a_crash_is_exit_4_with_one_line_and_the_traceback_in_a_file(repo_root, tmp_path, capsys, monkeypatch):
    import mha_ci.commands.validate as validate

    def broken(args):
        raise KeyError("surprise")

    monkeypatch.setattr(validate, "_handler", broken)
    assert main(["--root", str(repo_root), "validate"]) == ExitCode.INTERNAL_ERROR == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mha-ci: internal error: KeyError: 'surprise' (traceback in ")
    trace = Path(err.rsplit("traceback in ", 1)[1].rstrip(")"))
    assert "Traceback (most recent call last)" in trace.read_text() and "surprise" in trace.read_text()
    trace.unlink()


SLEEPER = """import os, sys, time
open(os.environ["MHA_CI_OUT"] + "/payload.pid", "w").write(str(os.getpid()))
time.sleep(120)
open(os.environ["MHA_CI_OUT"] + "/junit.xml", "w").write("<testsuite/>")
"""


def test_sigterm_kills_the_payload_and_the_run_says_interrupted(repo_root, tmp_path, capsys):
    """SIGTERM is how CI cancels: the payload's process group dies, results.json and summary.md
    say "interrupted" (never "exit 0, all gates pass"), and mha-ci exits 143."""
    import os
    import signal
    import threading
    import time

    from mha_ci.executors.base import PayloadRun
    from mha_ci.executors.local_process import run_python_payload
    from mha_ci.jobs import runner

    fake_root = tmp_path / "fake"      # a payload module that sleeps, on the payload's PYTHONPATH
    _write(fake_root / "src" / "mha_ci" / "__init__.py", "")
    _write(fake_root / "src" / "mha_ci" / "payloads" / "__init__.py", "")
    _write(fake_root / "src" / "mha_ci" / "payloads" / "sleeper.py", SLEEPER)
    payload_out = tmp_path / "payload"

    def sleeping_job(job, ctx):
        pipeline = ctx.pipeline
        run = PayloadRun(module="sleeper", args=(), toolchain=pipeline.toolchains[job.toolchain],
                         arch=pipeline.archs[job.arch], out_dir=payload_out)
        run_python_payload(sys.executable, run, fake_root, executor="host")
        raise AssertionError("the payload was not interrupted")

    def terminate_when_started():
        deadline = time.monotonic() + 60
        while not (payload_out / "payload.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    job = "correctness-interpreter-triton-3.8-1of2"
    runner.register("correctness", sleeping_job)
    killer = threading.Thread(target=terminate_when_started, daemon=True)
    killer.start()
    try:
        code = main(["--root", str(repo_root), "run", "--job", job, "--executor", "host", "--out", str(tmp_path / "out")])
    finally:
        runner.unregister("correctness")
        killer.join()
    assert code == ExitCode.TERMINATED == 143
    assert "interrupted (SIGTERM)" in capsys.readouterr().err
    pid = int((payload_out / "payload.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (payload_out / "junit.xml").exists()
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert (results["status"], results["exit_code"], results["pending"]) == ("interrupted", 143, [job])
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "INTERRUPTED" in summary and "all gates pass" not in summary


def test_a_run_in_progress_claims_no_verdict():
    from mha_ci.reports import summary

    text = summary.render({"status": "running", "exit_code": None, "pending": ["a", "b"], "jobs": []})
    assert "RUNNING: no verdict yet**, 2 job(s) still to run" in text and "all gates pass" not in text


def _planned(repo_root, tmp_path, capsys, changed: bytes) -> list[str]:
    listing = _write(tmp_path / "changed.txt", changed)
    assert main(["--root", str(repo_root), "plan", "--changed-files", str(listing), "--format", "json"]) == 0
    return [job["id"] for job in json.loads(capsys.readouterr().out)["jobs"]]


def test_a_path_climbing_out_of_docs_is_not_documentation(repo_root, tmp_path, capsys):
    docs_only = _planned(repo_root, tmp_path, capsys, b"docs/notes.md\n")
    climbing = _planned(repo_root, tmp_path, capsys, b"docs/../src/mha/kernel.py\n")
    assert climbing == _planned(repo_root, tmp_path, capsys, b"src/mha/kernel.py\n")
    assert set(climbing) > set(docs_only)


def test_non_ascii_paths_from_git_diff_z_match_their_rules(repo_root, tmp_path, capsys):
    plain = _planned(repo_root, tmp_path, capsys, b"docs/notes.md\n")
    config = _planned(repo_root, tmp_path, capsys, "docs/notes.md\0src/mha/configs/gfx942-caf\u00e9.json\0".encode())
    assert any("gfx942" in job for job in config) and not any("gfx942" in job for job in plain)


def test_a_changed_path_outside_the_repository_is_a_usage_error(repo_root, tmp_path, capsys):
    listing = _write(tmp_path / "changed.txt", b"../elsewhere/x.py\n")
    assert main(["--root", str(repo_root), "plan", "--changed-files", str(listing)]) == 2
    assert "not inside the repository" in capsys.readouterr().err


# The PR `gate` check (python -m mha_ci.export.gate): red unless every planned job of a non-draft
# pull request left a passing result. (id, plan job result, same repository, what the one planned
# job left behind: None = nothing, else (results.json status, verdict, exit code), phrase)
JOB = "correctness-interpreter-triton-3.8-1of2"
GATE_CASES = [
    ("draft-plan-skipped", "skipped", True, ("finished", "pass", 0), "ready for review"),
    ("plan-cancelled", "cancelled", True, ("finished", "pass", 0), "ended with 'cancelled'"),
    ("job-never-ran", "success", True, None, "did not run"),
    ("fork-gpu-withheld", "success", False, None, "withheld"),
    ("job-interrupted", "success", True, ("interrupted", "pass", 143), "status is 'interrupted'"),
    ("job-still-running", "success", True, ("running", "pass", 0), "status is 'running'"),
    ("job-crashed", "success", True, ("finished", "error", 4), "verdict error"),
]


@pytest.mark.parametrize("plan_result, same_repository, left, phrase", [c[1:] for c in GATE_CASES],
                         ids=[c[0] for c in GATE_CASES])
def test_the_pr_gate_is_red_without_a_verdict(tmp_path, plan_result, same_repository, left, phrase):
    from mha_ci.export import gate

    plan = _write(tmp_path / "plan.json", json.dumps({"jobs": [{"id": JOB}]}))
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    if left:
        status, verdict, code = left
        folder = artifacts / gate.artifact_name(JOB)
        _write(folder / "exit-code", f"{code}\n")
        _write(folder / "results.json", json.dumps({"schema": "mha-ci.results/1", "status": status, "exit_code": code,
                                                    "jobs": [{"job_id": JOB, "verdict": verdict}]}))
    code, lines = gate.run_gate(plan, artifacts, plan_result, same_repository)
    assert code == 1
    assert phrase in "\n".join(lines)


def test_ctrl_c_mid_job_leaves_an_interrupted_run_not_a_green_one(repo_root, tmp_path, capsys):
    """Ctrl-C during a job (a venv build, a payload): results.json is not left at "running, exit 0"."""
    from mha_ci.jobs import runner

    def interrupted_build(job, ctx):
        raise KeyboardInterrupt

    runner.register("correctness", interrupted_build)
    try:
        code = main(["--root", str(repo_root), "run", "--job", JOB, "--executor", "host", "--out", str(tmp_path)])
    finally:
        runner.unregister("correctness")
    assert code == ExitCode.INTERRUPTED == 130
    results = json.loads((tmp_path / "results.json").read_text())
    assert (results["status"], results["exit_code"], results["interrupted_by"]) == ("interrupted", 130, "SIGINT")
    assert "INTERRUPTED: exit 130 (interrupted (SIGINT))" in (tmp_path / "summary.md").read_text()
    assert "interrupted (SIGINT): no verdict" in capsys.readouterr().err
