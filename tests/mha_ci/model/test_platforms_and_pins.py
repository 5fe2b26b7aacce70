"""Toolchains per platform and the unpinned (record) mode of a GPU host that cannot install.

- a job runs its toolchain on its arch's platform: sm90 gets the cuda lock, never the CPU torch;
- rocm installs only triton over a base image: only triton is pinned, and the venv executor says why
  it cannot build it;
- `--pins record` runs what is installed, records every mismatch, and every result says so;
- one comparability rule (mha_ci.perf.comparable) for compare, the perf job and refresh;
- the committed sm90 baselines pass the refresh job's own checks.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mha_ci.cli import main as cli
from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.base import PayloadRun
from mha_ci.executors.host import HostExecutor
from mha_ci.executors.local_process import payload_environment
from mha_ci.executors.venv import VenvExecutor
from mha_ci.model.loader import load_pipeline
from mha_ci.payloads import pincheck
from mha_ci.perf import comparable
from mha_ci.perf.compare import compare
from perf_builders import gate
from mha_ci.perf.config import gate_policy
from mha_ci.refresh.core import RefreshPolicy, measurement_problems


def _policy() -> RefreshPolicy:
    spec = load_pipeline(REPO).perf
    return RefreshPolicy.from_perf(spec, gate_policy(spec))

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pipeline():
    return load_pipeline(REPO)


# ------------------------------------------------------------------- platforms

def test_each_arch_gets_its_platforms_lock(pipeline):
    for name in pipeline.toolchains:
        tc = pipeline.toolchains[name]
        sm90 = tc.on(pipeline.archs["sm90"].platform)
        assert sm90.platform == "cuda" and sm90.lock.name == "requirements-cuda.lock"
        assert "+cpu" not in sm90.pins["torch"], "an sm90 job must never get the CPU build of torch"
        assert sm90.pins["triton"] == tc.pins["triton"]        # one Triton per toolchain, every platform
        assert tc.on(pipeline.archs["interpreter"].platform).lock.name == "requirements.lock"


def test_cuda_locks_pair_triton_with_the_torch_that_declares_it(pipeline):
    assert pipeline.toolchains["triton-3.4"].on("cuda").pins["torch"] == "2.8.0"
    assert pipeline.toolchains["triton-3.8"].on("cuda").pins["torch"] == "2.14.1"


def test_cuda_lock_has_a_hash_for_python_3_11_and_3_12_wheels():
    text = (REPO / "containers" / "triton-3.4" / "requirements-cuda.lock").read_text()
    torch_entry = text.split("\ntorch==2.8.0 ", 1)[1].split("==", 1)[0]
    assert torch_entry.count("--hash=sha256:") == 2


def test_rocm_pins_only_what_it_installs_over_the_base_image(pipeline):
    rocm = pipeline.toolchains["triton-3.4"].on("rocm")
    assert rocm.pins == {"triton": "3.4.0"} and rocm.installs_only == ("triton",)


def test_the_venv_executor_says_why_it_cannot_build_rocm(pipeline, tmp_path):
    rocm = pipeline.toolchains["triton-3.4"].on("rocm")
    with pytest.raises(EnvironmentProblem, match="not on PyPI.*--executor docker"):
        VenvExecutor(REPO, cache=tmp_path).ensure_env(rocm)


def test_venv_environments_are_named_by_platform(pipeline, tmp_path):
    executor = VenvExecutor(REPO, cache=tmp_path)
    tc = pipeline.toolchains["triton-3.8"]
    assert executor.env_path(tc.on("cuda")).name.startswith("triton-3.8-cuda-")
    assert executor.env_path(tc) != executor.env_path(tc.on("cuda"))


def test_a_platform_without_an_environment_is_an_environment_error(pipeline):
    from dataclasses import replace
    bare = replace(pipeline.toolchains["triton-3.4"], platforms={})
    with pytest.raises(EnvironmentProblem, match="defines no cuda environment"):
        bare.on("cuda")


def test_only_must_name_pinned_packages(pipeline_root):
    path = pipeline_root / "pipelines" / "toolchains.yaml"
    path.write_text(path.read_text().replace("only: [triton]}", "only: [tritno]}"))
    assert cli(["--root", str(pipeline_root), "plan"]) == 2


# ------------------------------------------------------------------- pins: record mode

def _spec(mode: str) -> dict:
    return {"toolchain": "tc", "mode": mode, "pins": {"pytest": "0.0.1"}}


def test_record_mode_lists_every_mismatch_and_is_not_pinned():
    found = pincheck.report(_spec("record"))
    assert found["pins_checked"] is False and found["pin_mode"] == "record"
    assert found["pin_mismatches"] == [f"toolchain tc pins pytest==0.0.1 but the environment has pytest "
                                       f"{pincheck.installed_version('pytest')}"]


def test_record_mode_with_every_pin_matching_is_pinned():
    exact = {"toolchain": "tc", "mode": "record", "pins": {"pytest": pincheck.installed_version("pytest")}}
    assert pincheck.report(exact)["pins_checked"] is True


def test_record_mode_says_unpinned_on_stderr_and_runs():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "MHA_CI_PINS": json.dumps(_spec("record"))}
    proc = subprocess.run([sys.executable, "-m", "mha_ci.payloads.pincheck"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and "UNPINNED run" in proc.stderr and "pytest==0.0.1" in proc.stderr


def _payload(pipeline, tmp_path, toolchain="triton-3.4") -> PayloadRun:
    return PayloadRun(module="pincheck", args=("--record", "v.json"), toolchain=pipeline.toolchains[toolchain],
                      arch=pipeline.archs["interpreter"], out_dir=tmp_path / "out")


def test_host_executor_in_record_mode_runs_a_mismatching_toolchain(pipeline, tmp_path):
    result = HostExecutor(REPO, pin_mode="record").run(_payload(pipeline, tmp_path))
    assert result.exit_code == 0 and result.provenance["pin_mode"] == "record"


def test_host_executor_enforces_by_default(pipeline, tmp_path):
    if pincheck.installed_version("triton") == pipeline.toolchains["triton-3.4"].pins["triton"]:
        pytest.skip("this interpreter happens to hold triton-3.4's pins")
    with pytest.raises(EnvironmentProblem, match="exit 3"):
        HostExecutor(REPO).run(_payload(pipeline, tmp_path))


def test_host_executor_keeps_the_callers_pythonpath_behind_src(pipeline, tmp_path, monkeypatch):
    # a Triton carried to a GPU host as a folder on PYTHONPATH is part of the host "as it is"
    monkeypatch.setenv("PYTHONPATH", "/opt/carried-triton")
    env = payload_environment(_payload(pipeline, tmp_path), REPO, "record", keep_pythonpath=True)
    assert env["PYTHONPATH"] == f"{REPO / 'src'}{os.pathsep}/opt/carried-triton"
    assert payload_environment(_payload(pipeline, tmp_path), REPO)["PYTHONPATH"] == str(REPO / "src")


@pytest.mark.parametrize("argv", [["run", "--pins", "record"], ["run", "--pins", "record", "--executor", "docker"],
                                  ["perf", "measure", "--pins", "record"]])
def test_record_mode_needs_the_host_executor(argv, capsys):
    assert cli(["--root", str(REPO), *argv]) == 2
    assert "--pins record needs --executor host" in capsys.readouterr().err


# ------------------------------------------------------------------- one comparability rule

def _prov(**kw) -> dict:
    base = {"arch": "sm90", "gpu": "NVIDIA H200", "kernel": "mha", "toolchain": "triton-3.4", "driver": "580",
            "cuda": "13.0", "versions": {"torch": "2.8.0", "triton": "3.4.0"}, "pins_checked": True}
    return {**base, **kw}


@pytest.mark.parametrize("change, refused", [
    ({"arch": "sm100"}, "different arch"), ({"gpu": "NVIDIA H100"}, "different GPU"),
    ({"kernel": "sdpa"}, "different kernel"), ({"toolchain": "triton-3.8"}, "different toolchain"),
    ({"versions": {"torch": "2.8.0", "triton": "3.6.0"}}, "different triton"),
])
def test_what_refuses_a_comparison(change, refused):
    assert refused in comparable.refusal(_prov(), _prov(**change))


@pytest.mark.parametrize("change, noted", [
    ({"versions": {"torch": "2.11.0+cu130", "triton": "3.4.0"}}, "torch differs"),
    ({"driver": "590"}, "driver differs"), ({"cuda": "12.8"}, "CUDA runtime differs"),
    ({"pins_checked": False, "pin_mismatches": ["torch 2.11.0"]}, "UNPINNED candidate: torch 2.11.0"),
])
def test_what_is_noted_but_compared(change, noted):
    assert comparable.refusal(_prov(), _prov(**change)) is None
    assert any(noted in n for n in comparable.notes(_prov(), _prov(**change)))


def test_a_local_version_suffix_is_one_release():
    assert comparable.refusal(_prov(), _prov(versions={"torch": "2.8.0+cu128", "triton": "3.4.0"})) is None
    assert comparable.notes(_prov(), _prov(versions={"torch": "2.8.0+cu128", "triton": "3.4.0"})) == []


def test_an_unpinned_candidate_is_gated_and_the_verdict_says_so():
    stats = {"trimmed_mean_us": 100.0, "median_us": 100.0, "max_us": 101.0, "noise_pct": 1.0, "reps": 5,
             "dispatches": 40}
    doc = lambda prov: {"provenance": prov, "results": [{"key": "k", "stats": stats}], "selection": {"subset": "pr"}}
    c = compare(doc(_prov()), doc(_prov(pins_checked=False, pin_mismatches=["torch 2.11.0"])), gate())
    assert not c.refused and c.summary["ok"] == 1
    assert any(n.startswith("UNPINNED candidate") for n in c.notes) and c.to_dict()["notes"]


# ------------------------------------------------------------------- the committed baselines

@pytest.mark.parametrize("toolchain", ["triton-3.4", "triton-3.8"])
def test_committed_sm90_baselines_pass_the_refresh_checks(pipeline, toolchain):
    doc = json.loads((REPO / "perf_baselines" / "sm90" / f"{toolchain}.json").read_text())
    prov = doc["provenance"]
    assert prov["arch"] == "sm90" and prov["gpu"] == "NVIDIA H200"
    assert prov["pins_checked"] is False and prov["pin_mismatches"], "measured with the H200 image's torch"
    arch = pipeline.archs["sm90"]
    tc = pipeline.toolchains[toolchain].on(arch.platform)
    bad, mismatch = measurement_problems(doc, arch, tc, doc, _policy(), allow_unpinned=True)
    assert mismatch == []
    # and without --pins record it is refused as unpinned, never taken silently
    _, strict = measurement_problems(doc, arch, tc, doc, _policy())
    assert any("unpinned measurement" in m for m in strict)


def test_an_unpinned_note_leads_with_torch_and_counts_the_rest():
    mismatches = [f"toolchain t pins pkg{i}==1 but the environment has pkg{i} 2" for i in range(5)]
    mismatches.append("toolchain t pins torch==2.8.0 but the environment has torch 2.11.0")
    note = comparable.unpinned_summary(mismatches)
    assert note.startswith("toolchain t pins torch==2.8.0") and note.endswith("and 3 more pin(s) differ")


class _Props:
    name, gcnArchName, multi_processor_count, total_memory = "NVIDIA H200", "NVIDIA H200", 132, 2**37


class _CudaTorch:
    """What torch 2.11.0+cu130 reports on the H200: gcnArchName holds the GPU's name."""
    class version:
        cuda, hip = "13.0", None

    class cuda:
        get_device_properties = staticmethod(lambda i: _Props())
        get_device_capability = staticmethod(lambda i: (9, 0))


def test_a_cuda_gpus_arch_comes_from_its_compute_capability():
    from mha_ci.perf.provenance import device_facts
    facts = device_facts(_CudaTorch, "cuda")
    assert facts["arch"] == "sm90" and facts["gpu"] == "NVIDIA H200"


def test_a_pinned_refresh_of_an_unpinned_baseline_stays_unpinned_while_that_run_is_kept():
    from mha_ci.perf.combine import roll
    method = {"warmup": 10, "dispatches": 40, "reps": 5, "trim": [10, 10]}
    stats = {"trimmed_mean_us": 100.0, "median_us": 100.0, "max_us": 101.0, "noise_pct": 1.0, "reps": 5,
             "dispatches": 40}
    doc = lambda prov: {"schema": "mha-ci.perf/1", "provenance": prov, "method": method,
                        "results": [{"key": "k", "stats": dict(stats)}], "selection": {"subset": "full"}}
    old = doc(_prov(pins_checked=False, pin_mismatches=["torch"]))
    rolled, reset = roll(old, doc(_prov()), window=2)
    assert reset is None and rolled["provenance"]["pins_checked"] is False
    again, _ = roll(rolled, doc(_prov()), window=2)          # the unpinned run has left the window
    assert again["provenance"]["pins_checked"] is True
