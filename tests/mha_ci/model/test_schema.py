"""`mha-ci validate`: every broken pipeline file is exit 2 with file:line, key and a suggestion.

Each test edits a temporary copy of pipelines/ (the `pipeline_root` fixture) and runs the real
command line. Expected line numbers are computed from the edited text, never hard-coded.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.model.loader import PIPELINE_FILES, load_pipeline

CORE = [f"pipelines/{name}" for name in PIPELINE_FILES]


def _validate(root: Path, *files: str) -> int:
    return main(["--root", str(root), "validate", *[str(root / f) for f in (files or CORE)]])


def _edit(root: Path, name: str, old: str, new: str, count: int = 1) -> Path:
    path = root / "pipelines" / name
    text = path.read_text()
    assert old in text, f"fixture drift: {old!r} not in {name}"
    path.write_text(text.replace(old, new, count))
    return path


def _line_of(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def _error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_checked_in_pipeline_is_valid(repo_root, capsys):
    assert _validate(repo_root) == 0
    assert capsys.readouterr().out.strip() == f"ok: {len(PIPELINE_FILES)} files"


def test_whole_folder_is_valid_including_files_other_modules_own(repo_root, capsys):
    """Every pipelines/*.yaml has a validator (perf.yaml and workloads.yaml register theirs)."""
    code = main(["--root", str(repo_root), "validate"])
    err = capsys.readouterr().err
    assert code == 0, err


def test_checked_in_pipeline_loads(repo_root):
    pipeline = load_pipeline(repo_root)
    assert list(pipeline.toolchains) == ["triton-3.4", "triton-3.8"]
    assert pipeline.toolchains["triton-3.4"].role == "golden"
    assert pipeline.toolchains["triton-3.8"].role == "top-of-tree"
    assert pipeline.toolchains["triton-3.4"].pins["triton"] == "3.4.0"
    assert pipeline.toolchains["triton-3.8"].pins["triton"] == "3.8.0"
    assert pipeline.toolchains["triton-3.4"].pins["numpy"] == "2.2.6"     # < 2.3, docs/facts.md
    assert pipeline.toolchains["triton-3.4"].lock == repo_root / "containers/triton-3.4/requirements.lock"
    assert list(pipeline.archs) == ["gfx942", "gfx950", "sm90", "interpreter"]
    assert pipeline.archs["sm90"].compile_target == ("cuda", 90, 32)
    assert pipeline.archs["gfx950"].compile_target == ("hip", "gfx950", 64)
    assert pipeline.archs["interpreter"].compile_target is None
    assert pipeline.archs["interpreter"].visible_devices_env is None
    assert pipeline.archs["gfx942"].visible_devices_env == "HIP_VISIBLE_DEVICES"
    assert pipeline.archs["gfx942"].runner_labels == ("self-hosted", "linux", "mi300x")
    assert pipeline.shards("interpreter") == 2 and pipeline.shards("gfx950") == 4
    assert list(pipeline.kinds) == ["correctness", "perf", "checksums", "refresh", "memcheck", "docs"]
    assert pipeline.kinds["checksums"].archs == ("interpreter",)


def test_unknown_key_names_line_and_closest_key(pipeline_root, capsys):
    path = _edit(pipeline_root, "archs.yaml", "    workers: 8\n    correctness_shards: 4\n  gfx950:",
                 "    wrokers: 8\n    correctness_shards: 4\n  gfx950:")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert f"archs.yaml:{_line_of(path, 'wrokers')}:" in err
    assert "archs / gfx942 / wrokers" in err
    assert "did you mean 'workers'" in err


def test_unknown_event_kind_key_suggests_the_event(pipeline_root, capsys):
    path = _edit(pipeline_root, "jobs.yaml", "  schedule:\n", "  schedul:\n")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert f"jobs.yaml:{_line_of(path, 'schedul:')}:" in err
    assert "did you mean 'schedule'" in err


def test_wrong_type_names_line_and_key(pipeline_root, capsys):
    path = _edit(pipeline_root, "archs.yaml", "correctness_shards: 2", "correctness_shards: two")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert f"archs.yaml:{_line_of(path, 'correctness_shards: two')}:" in err
    assert "archs / interpreter / correctness_shards" in err


def test_vendor_and_device_must_agree(pipeline_root, capsys):
    _edit(pipeline_root, "archs.yaml", "device: nvidia-gpu", "device: amd-gpu")
    assert _validate(pipeline_root) == 2
    assert "vendor 'nvidia' needs device 'nvidia-gpu'" in _error(capsys)


def test_unknown_toolchain_in_known_failures(pipeline_root, capsys):
    path = _edit(pipeline_root, "known_failures.yaml", "known_failures:\n",
                 "known_failures:\n  - test: tests/mha/test_forward.py::test_dense\n"
                 "    arch: gfx950\n    toolchain: triton-3.88\n    reason: example\n")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert f"known_failures.yaml:{_line_of(path, 'triton-3.88')}:" in err
    assert "unknown toolchain 'triton-3.88'" in err
    assert "did you mean 'triton-3.8'" in err


def test_unknown_arch_in_known_failures(pipeline_root, capsys):
    path = _edit(pipeline_root, "known_failures.yaml", "known_failures:\n",
                 "known_failures:\n  - test: tests/mha/test_forward.py::test_dense\n"
                 "    arch: gfx95\n    toolchain: triton-3.8\n    reason: example\n")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert f"known_failures.yaml:{_line_of(path, 'gfx95')}:" in err
    assert "unknown arch 'gfx95'" in err and "did you mean 'gfx950'" in err


def test_known_failure_needs_a_reason(pipeline_root, capsys):
    _edit(pipeline_root, "known_failures.yaml", "known_failures:\n",
          "known_failures:\n  - test: tests/mha/test_forward.py::test_dense\n"
          "    arch: gfx950\n    toolchain: triton-3.8\n")
    assert _validate(pipeline_root) == 2
    assert "known_failures / 0 / reason" in _error(capsys)


def test_known_failures_load_into_the_model(pipeline_root):
    _edit(pipeline_root, "known_failures.yaml", "known_failures:\n",
          "known_failures:\n  - test: tests/mha/test_forward.py::test_dense[bf16*]\n"
          "    arch: gfx950\n    toolchain: triton-3.8\n    reason: upstream issue\n")
    pipeline = load_pipeline(pipeline_root)
    assert [f.test for f in pipeline.known_failures_for("gfx950", "triton-3.8")] == \
        ["tests/mha/test_forward.py::test_dense[bf16*]"]
    assert pipeline.known_failures_for("gfx950", "triton-3.4") == ()


def test_unknown_arch_in_trigger(pipeline_root, capsys):
    path = _edit(pipeline_root, "triggers.yaml", "archs: [sm90]\n", "archs: [sm9]\n")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert f"triggers.yaml:{_line_of(path, 'archs: [sm9]')}:" in err
    assert "labels / ci:sm90 / archs / 0: unknown arch 'sm9'" in err
    assert "did you mean 'sm90'" in err


def test_unknown_job_kind_in_trigger(pipeline_root, capsys):
    path = _edit(pipeline_root, "triggers.yaml", "kinds: [perf]", "kinds: [perff]")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert f"triggers.yaml:{_line_of(path, 'perff')}:" in err
    assert "unknown job kind 'perff'" in err and "did you mean 'perf'" in err


def test_unknown_arch_in_jobs_matrix(pipeline_root, capsys):
    path = _edit(pipeline_root, "jobs.yaml", "archs: [gfx942, gfx950, sm90, interpreter]",
                 "archs: [gfx942, gfx950, sm90, interpretr]")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert f"jobs.yaml:{_line_of(path, 'interpretr')}:" in err
    assert "did you mean 'interpreter'" in err


def test_label_must_carry_the_prefix(pipeline_root, capsys):
    _edit(pipeline_root, "triggers.yaml", "  ci:sm90:\n", "  sm90:\n")
    assert _validate(pipeline_root) == 2
    assert "does not start with label_prefix 'ci:'" in _error(capsys)


def test_duplicate_key(pipeline_root, capsys):
    path = _edit(pipeline_root, "toolchains.yaml", "  triton-3.8:\n", "  triton-3.4:\n")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    second = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line == "  triton-3.4:"][1]
    assert f"toolchains.yaml:{second}: duplicate key 'triton-3.4'" in err


def test_bad_yaml(pipeline_root, capsys):
    path = _edit(pipeline_root, "jobs.yaml", "archs: [gfx942, gfx950, sm90]\n", "archs: [gfx942, gfx950, sm90\n")
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    assert "jobs.yaml:" in err and "invalid YAML" in err
    line = int(err.split("jobs.yaml:")[1].split(":")[0])
    assert line >= _line_of(path, "archs: [gfx942, gfx950, sm90\n".strip())


def test_missing_lock_file(pipeline_root, capsys):
    (pipeline_root / "containers/triton-3.8/requirements.lock").unlink()
    assert _validate(pipeline_root) == 2
    err = _error(capsys)
    path = pipeline_root / "pipelines/toolchains.yaml"
    assert f"toolchains.yaml:{_line_of(path, 'containers/triton-3.8/requirements.lock')}:" in err
    assert "lock file containers/triton-3.8/requirements.lock not found" in err


def test_lock_file_with_a_loose_pin(pipeline_root, capsys):
    lock = pipeline_root / "containers/triton-3.4/requirements.lock"
    lock.write_text(lock.read_text().replace("torch==2.13.0+cpu", "torch>=2.13"))
    assert _validate(pipeline_root) == 2
    assert "not an exact pin" in _error(capsys)


def test_lock_file_must_pin_triton(pipeline_root, capsys):
    lock = pipeline_root / "containers/triton-3.4/requirements.lock"
    lock.write_text("".join(l for l in lock.read_text().splitlines(True) if not l.startswith("triton==")))
    assert _validate(pipeline_root) == 2
    assert "pins no triton" in _error(capsys)


def test_unknown_file_found_when_validating_the_whole_folder(pipeline_root, capsys):
    for other in (pipeline_root / "pipelines").glob("*.yaml"):     # only the core files stay
        if other.name not in PIPELINE_FILES:
            other.unlink()
    (pipeline_root / "pipelines/known_failure.yml").write_text("known_failures: []\n")
    assert main(["--root", str(pipeline_root), "validate"]) == 2
    assert "unknown pipeline file 'known_failure.yml'" in _error(capsys)


def test_missing_core_file(pipeline_root, capsys):
    (pipeline_root / "pipelines/triggers.yaml").unlink()
    assert _validate(pipeline_root, "pipelines/archs.yaml") == 2
    assert "missing pipeline file pipelines/triggers.yaml" in _error(capsys)


def test_unknown_pipeline_file_is_an_error(pipeline_root, capsys):
    (pipeline_root / "pipelines/trigers.yaml").write_text("labels: {}\n")
    assert _validate(pipeline_root, *CORE, "pipelines/trigers.yaml") == 2
    err = _error(capsys)
    assert "unknown pipeline file 'trigers.yaml'" in err and "did you mean 'triggers.yaml'" in err


def test_perf_files_load_with_the_pipeline(pipeline_root, capsys):
    # perf.yaml and workloads.yaml are pipeline files like the others: naming either validates the
    # whole pipeline, and `plan` (which never measures) refuses a broken one too.
    _edit(pipeline_root, "perf.yaml", "floor_pct:", "flor_pct:")
    assert _validate(pipeline_root, "pipelines/workloads.yaml") == 2
    assert "perf.yaml" in (err := _error(capsys)) and "did you mean 'floor_pct'" in err
    assert main(["--root", str(pipeline_root), "plan"]) == 2
    assert "did you mean 'floor_pct'" in _error(capsys)


def test_plan_refuses_a_broken_pipeline(pipeline_root, capsys):
    _edit(pipeline_root, "archs.yaml", "\n    workers: ", "\n    workerz: ")     # the first arch's key
    assert main(["--root", str(pipeline_root), "plan"]) == 2
    assert "did you mean 'workers'" in _error(capsys)


def test_resource_limits_belong_to_compiled_archs_only(pipeline_root, capsys):
    _edit(pipeline_root, "archs.yaml", "    compile_target: null\n",
          "    compile_target: null\n    limits: {shared_bytes: 1024, registers: 8}\n")
    assert _validate(pipeline_root) == 2
    assert "limits apply to compiled code objects" in _error(capsys)


def test_resource_limits_must_be_positive(pipeline_root, capsys):
    _edit(pipeline_root, "archs.yaml", "limits: {shared_bytes: 65536,", "limits: {shared_bytes: 0,")
    assert _validate(pipeline_root) == 2
    assert "shared_bytes" in _error(capsys)


@pytest.mark.parametrize("old, new", [("workers: 8", "workers: true"), ("correctness_shards: 4", "correctness_shards: yes"),
                                      ("shared_bytes: 65536", "shared_bytes: true")])
def test_a_boolean_is_not_a_count(pipeline_root, capsys, old, new):
    _edit(pipeline_root, "archs.yaml", old, new)
    assert _validate(pipeline_root) == 2
    err = capsys.readouterr().err
    assert "archs.yaml:" in err and "integer" in err, err


def test_a_kinds_own_shard_count_needs_sharding(pipeline_root, capsys):
    _edit(pipeline_root, "jobs.yaml", "    sharded: true\n    shards: 2\n", "    shards: 2\n")
    assert _validate(pipeline_root) == 2
    assert "shards is set but the kind is not sharded" in _error(capsys)


def test_a_kinds_shard_count_is_a_bounded_int(pipeline_root, capsys):
    _edit(pipeline_root, "jobs.yaml", "    shards: 2\n", "    shards: \"2\"\n")
    assert _validate(pipeline_root) == 2
    _edit(pipeline_root, "jobs.yaml", "    shards: \"2\"\n", "    shards: 1000\n")
    assert _validate(pipeline_root) == 2
