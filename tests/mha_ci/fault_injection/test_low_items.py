"""Smaller gaps of issue 34: values that were ignored or errors that said too little."""
import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode


@pytest.mark.parametrize("value", ["sm90:x", "nvidia-gpu,cuda", "amd"])
def test_an_unknown_assumed_device_is_a_usage_error_naming_the_variable(repo_root, tmp_path, monkeypatch, capsys,
                                                                         value):
    monkeypatch.setenv("MHA_CI_ASSUME_DEVICES", value)
    code = main(["--root", str(repo_root), "run", "--job", "correctness-interpreter-triton-3.8-1of2",
                 "--out", str(tmp_path / "out")])
    assert code == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "MHA_CI_ASSUME_DEVICES" in err and "nvidia-gpu" in err


@pytest.mark.parametrize("value", ["", "none", "amd-gpu, nvidia-gpu"])
def test_known_assumed_devices_are_taken(value):
    from mha_ci.executors.devices import available_devices

    assert "none" in available_devices(value)


def test_perf_history_of_an_unknown_arch_names_the_known_ones(repo_root, tmp_path, capsys):
    code = main(["--root", str(repo_root), "perf", "history", "--arch", "sm91", "--toolchain", "triton-3.4",
                 "--out", str(tmp_path / "out")])
    assert code == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "archs with baselines: sm90 " in err and "did you mean 'sm90'" in err


LOOKALIKES = [("ci\uff1asm90", "ci:sm90"),       # fullwidth colon
              ("\u0441i:sm90", "ci:sm90"),       # Cyrillic es
              ("ci:\u200bsm90", "ci:sm90"),      # zero-width space
              ("ci:gfx95\u200b0", "ci:gfx950")]


@pytest.mark.parametrize("label, meant", LOOKALIKES)
def test_a_lookalike_label_in_an_event_fails_naming_the_label_meant(repo_root, tmp_path, capsys, label, meant):
    import json

    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"base": {"ref": "main"}, "labels": [{"name": label}]}}))
    changed = tmp_path / "changed.txt"
    changed.write_text("docs/ci-guide.md\n")
    code = main(["--root", str(repo_root), "plan", "--github-event", str(event), "--event", "pull_request",
                 "--changed-files", str(changed)])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG_ERROR, err
    assert f"did you mean '{meant}'" in err and "non-ASCII or invisible" in err


@pytest.mark.parametrize("label", [label for label, _ in LOOKALIKES])
def test_a_lookalike_label_in_triggers_yaml_is_refused(pipeline_root, label):
    from mha_ci.errors import ConfigError
    from mha_ci.model.loader import load_pipeline

    triggers = pipeline_root / "pipelines" / "triggers.yaml"
    text = triggers.read_text()
    assert "ci:perf:" in text
    triggers.write_text(text.replace("ci:perf:", f"{json_string(label)}:", 1))
    with pytest.raises(ConfigError, match="non-ASCII or invisible"):
        load_pipeline(pipeline_root)


def json_string(text: str) -> str:
    import json

    return json.dumps(text)             # a YAML double-quoted scalar takes JSON's \u escapes


def test_a_lock_pin_without_a_hash_fails_validate(pipeline_root, capsys):
    lock = pipeline_root / "containers" / "triton-3.4" / "requirements.lock"
    text = lock.read_text()
    lock.write_text(text.replace("execnet==2.1.2 \\\n", "execnet==2.1.2\n", 1).replace(
        "    --hash=sha256:67fba928dd5a544b783f6056f449e5e3931a5c378b128bc18501f7ea79e296ec\n", "", 1))
    assert main(["--root", str(pipeline_root), "validate"]) == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "pins execnet without --hash" in err and "requirements.lock" in err


@pytest.mark.parametrize("kind, said", [("folder", "is a folder"), ("fifo", "is a FIFO")])
def test_a_lock_that_is_not_a_file_says_what_it_is(pipeline_root, capsys, kind, said):
    import os

    lock = pipeline_root / "containers" / "triton-3.4" / "requirements.lock"
    lock.unlink()
    if kind == "folder":
        lock.mkdir()
    else:
        os.mkfifo(lock)
    assert main(["--root", str(pipeline_root), "validate"]) == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert said in err and "not found" not in err


def test_workers_without_pytest_xdist_under_pins_record_is_an_environment_error(tmp_path, capsys, monkeypatch):
    """--pins record does not refuse a missing pytest-xdist: the payload must, before pytest reads
    `-n` as a usage error and the shard as failed."""
    from mha_ci.payloads import correctness

    monkeypatch.setenv("MHA_CI_OUT", str(tmp_path))
    monkeypatch.setattr(correctness.pincheck, "enforce_report", lambda: {
        "versions": {"pytest-xdist": None}, "pins_checked": False,
        "pin_mismatches": ["toolchain t pins pytest-xdist==3.8.0 but the environment does not have pytest-xdist"]})
    (tmp_path / "tests.txt").write_text("tests/mha/test_nothing.py::test_x\n")
    code = correctness.main(["run", "--tests", "tests.txt", "--junit", "junit.xml", "--report", "report.json",
                             "--workers", "2"])
    assert code == ExitCode.ENVIRONMENT_ERROR
    err = capsys.readouterr().err
    assert "pytest-xdist" in err and "environment error" in err


def test_an_unconfined_seccomp_profile_is_amd_only_and_said_why_where_it_is_emitted(repo_root):
    """The AMD GPU containers run pull-request code without a seccomp filter: the generated
    workflows and the CI guide's trust section must say so and why, not leave it to be found."""
    from mha_ci.export.matrix import CONTAINER_OPTIONS

    assert [kind for kind, options in CONTAINER_OPTIONS.items() if "seccomp=unconfined" in options] == ["amd-gpu"]
    for name in ("pr-gpu.yml", "main.yml"):
        line = next(line for line in (repo_root / ".github/workflows" / name).read_text().splitlines()
                    if "CONTAINER_OPTIONS:" in line)
        assert "# AMD GPU jobs run with seccomp=unconfined" in line and "CI guide" in line, name
    guide = (repo_root / "docs/ci-guide.md").read_text()
    trust = guide[guide.index("### Trust"):guide.index("### Labels")]
    assert "seccomp=unconfined" in trust and "ephemeral runner" in trust


# -- whole or not at all: files other steps read as results or inputs ----------------------------

def test_a_tune_record_on_a_full_disk_is_an_environment_error_leaving_the_earlier_one(tmp_path, monkeypatch):
    from mha_ci.errors import EnvironmentProblem
    from mha_ci.tune import outdir
    from test_full_disk import full_disk

    target = tmp_path / "plan.json"
    target.write_text('{"pass": 1}\n')
    full_disk(monkeypatch, {"plan.json"})
    with pytest.raises(EnvironmentProblem):
        outdir.write_json(target, {"pass": 2})
    assert target.read_text() == '{"pass": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_a_group_plan_on_a_full_disk_is_an_environment_error_leaving_the_earlier_one(repo_root, tmp_path, monkeypatch,
                                                                                      capsys):
    """The gate judges the jobs --group-plan lists: half a list would be a gate over fewer jobs."""
    import json

    from test_full_disk import full_disk

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"jobs": [{"id": "correctness-interpreter-triton-3.4-1of2", "kind": "correctness",
                                          "arch": "interpreter", "toolchain": "triton-3.4"}]}))
    grouped = tmp_path / "grouped.json"
    grouped.write_text("earlier\n")
    full_disk(monkeypatch, {"grouped.json"})
    code = main(["--root", str(repo_root), "export", "matrix", "--plan", str(plan), "--group-plan", "cpu", str(grouped)])
    assert code == ExitCode.ENVIRONMENT_ERROR, capsys.readouterr().err
    assert grouped.read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grouped.json", "plan.json"]


def test_a_shards_test_list_on_a_full_disk_is_an_environment_error_not_a_shorter_shard(repo_root, tmp_path,
                                                                                        monkeypatch):
    from mha_ci.errors import EnvironmentProblem
    from mha_ci.jobs import JobResult
    from mha_ci.jobs.correctness import job
    from mha_ci.model.loader import load_pipeline
    from test_full_disk import full_disk

    pipeline = load_pipeline(repo_root)
    result = JobResult(job_id="correctness-interpreter-triton-3.4-1of1", kind="correctness", verdict="pass")
    full_disk(monkeypatch, {"tests.txt"})
    with pytest.raises(EnvironmentProblem):
        job._shard(["tests/mha/test_a.py::test_x", "tests/mha/test_b.py::test_y"], pipeline,
                   pipeline.archs["interpreter"], "triton-3.4", 1, 1, tmp_path, result)
    assert not (tmp_path / "tests.txt").exists()
