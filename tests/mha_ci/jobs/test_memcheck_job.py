"""The memcheck job's verdict from a shard's report: green only when every self-test saw its
plant, every problem ran clean (or as a known finding) and every variant launched."""
from __future__ import annotations

import copy

import pytest

from mha_ci.errors import ExitCode
from mha_ci.jobs import JobResult
from mha_ci.jobs.memcheck import judge

CLEAN = {
    "arch": "sm90", "tools": ["memcheck", "initcheck"], "sanitizer": {"path": "/cuda/bin/compute-sanitizer",
                                                                       "version": "2025.3.1"},
    "variants_listed": 222, "variants_in_shard": 3, "variants_covered": 3, "uncovered": [], "problems": 2,
    "self_tests": [{"tool": "memcheck", "status": "seen", "why": ""}, {"tool": "initcheck", "status": "seen", "why": ""}],
    "results": [{"tool": t, "label": label, "status": "clean", "reports": [], "seconds": 1.0}
                for t in ("memcheck", "initcheck") for label in ("fp16-d64-plain", "fp16-d128-plain")],
}


def _judge(report, exit_code=0) -> JobResult:
    result = JobResult(job_id="memcheck-sm90-triton-3.4-1of2", kind="memcheck", verdict="fail",
                       exit_code=ExitCode.GATE_FAILED)
    judge(result, report, exit_code)
    return result


def test_clean_and_covered_is_green():
    result = _judge(CLEAN)
    assert result.verdict == "pass" and result.exit_code == ExitCode.OK
    assert "2 problems clean under memcheck, initcheck" in result.message and "3 of 3 variants" in result.message
    assert result.details["seconds_per_tool"] == {"memcheck": 2.0, "initcheck": 2.0}


def test_a_report_names_problem_kernel_and_first_lines():
    report = copy.deepcopy(CLEAN)
    report["results"][1].update(status="reported", reports=[{
        "headline": "Invalid __global__ read of size 2 bytes", "kernel": "attn_fwd",
        "lines": ["Invalid __global__ read of size 2 bytes", "at attn_fwd+0x1c70 in forward.py:141"]}])
    result = _judge(report, 1)
    assert result.verdict == "fail"
    assert "memcheck reported in attn_fwd while fp16-d128-plain ran: Invalid __global__ read" in result.message
    assert result.details["failed_tests"] == ["memcheck::fp16-d128-plain"]
    assert result.details["failures"][0]["lines"][1].startswith("at attn_fwd")


def test_a_missed_plant_is_red_even_when_everything_ran_clean():
    report = copy.deepcopy(CLEAN)
    report["self_tests"][1] = {"tool": "initcheck", "status": "missed", "why": "initcheck did not report the plant"}
    result = _judge(report)
    assert result.verdict == "fail" and "did not report the plant" in result.message


def test_an_uncovered_variant_is_red():
    report = copy.deepcopy(CLEAN)
    report.update(variants_covered=2, uncovered=["sm90/forward/default/fwd/fp16-d128-plain"])
    result = _judge(report)
    assert result.verdict == "fail" and "never launched" in result.message


@pytest.mark.parametrize("status", ["crashed", "not-run", "fixed"])
def test_a_problem_that_did_not_run_clean_is_red(status):
    report = copy.deepcopy(CLEAN)
    report["results"][0].update(status=status, why="stopped", tail=["RuntimeError: CUDA error"])
    assert _judge(report, 1).verdict == "fail"


def test_known_findings_keep_it_green_and_are_counted():
    report = copy.deepcopy(CLEAN)
    report["results"][3].update(status="known", known_reason="TMA stores")
    result = _judge(report)
    assert result.verdict == "pass" and "but for 1 known finding(s)" in result.message


def test_nothing_judged_is_red():
    report = copy.deepcopy(CLEAN)
    report.update(problems=0, results=[], variants_in_shard=0, variants_covered=0)
    assert _judge(report, 4).verdict == "fail"


def test_a_failed_payload_with_a_clean_report_is_no_verdict():
    assert _judge(CLEAN, 4).verdict == "fail"
