"""compute-sanitizer output as the memcheck payload reads it: reports attributed to the problem
whose markers surround them, kernels named, summaries counted (no GPU, no torch)."""
from __future__ import annotations

from mha_ci.payloads import sanitizer

LOG = f"""\
========= COMPUTE-SANITIZER
{sanitizer.begin_line("fp16-d64-plain")}
{sanitizer.end_line("fp16-d64-plain", '{{"kernels":["attn_fwd"],"seconds":1.5}}')}
{sanitizer.begin_line("fp16-d64-causal")}
========= Invalid __global__ read of size 2 bytes
=========     at attn_fwd+0x1c70 in /w/src/mha/kernels/forward.py:141
=========     by thread (37,0,0) in block (3,1,0)
=========     Address 0x7f2c4e0a6fa0 is out of bounds
=========     and is 2 bytes after the nearest allocation at 0x7f2c4e000000 of size 683936 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dfbef] in libcuda.so.1
=========
========= Invalid __global__ read of size 2 bytes
=========     at 0x1c70 in /w/src/mha/kernels/forward.py:141:attn_fwd
=========     by thread (38,0,0) in block (3,1,0)
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cuStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========
Traceback (most recent call last):
RuntimeError: CUDA error: unspecified launch failure
========= ERROR SUMMARY: 3 errors
"""


def test_reports_fall_in_the_problem_that_ran():
    parsed = sanitizer.parse(LOG)
    clean, faulty = parsed.sections
    assert clean.label == "fp16-d64-plain" and clean.finished and not clean.reports
    assert '"attn_fwd"' in clean.info
    assert faulty.label == "fp16-d64-causal" and not faulty.finished
    assert [r.kernel for r in faulty.reports] == ["attn_fwd", "attn_fwd", ""]
    assert faulty.reports[0].headline == "Invalid __global__ read of size 2 bytes"
    assert "Address 0x7f2c4e0a6fa0 is out of bounds" in faulty.reports[0].lines
    assert len(faulty.reports[0].lines) <= sanitizer.FIRST_LINES
    assert parsed.summary_errors == 3 and parsed.report_count == 3 and not parsed.outside


def test_a_report_outside_every_problem_is_kept():
    parsed = sanitizer.parse("========= Uninitialized __global__ memory read of size 4 bytes\n"
                             "=========     at k+0x10 in x.py:3\n========= ERROR SUMMARY: 1 error\n")
    assert [r.kernel for r in parsed.outside] == ["k"] and parsed.sections == []


def test_a_clean_run_has_no_reports():
    text = "========= COMPUTE-SANITIZER\n" + sanitizer.begin_line("a") + "\n" + sanitizer.end_line("a", "{}") + \
        "\n========= ERROR SUMMARY: 0 errors\n"
    parsed = sanitizer.parse(text)
    assert parsed.report_count == 0 and parsed.summary_errors == 0 and parsed.sections[0].finished


def test_the_command_makes_any_report_an_error_exit():
    cmd = sanitizer.command("/cuda/bin/compute-sanitizer", "initcheck")
    assert cmd[:3] == ["/cuda/bin/compute-sanitizer", "--tool", "initcheck"]
    assert cmd[cmd.index("--error-exitcode") + 1] == str(sanitizer.ERROR_EXIT)


def test_find_honours_the_variable(tmp_path, monkeypatch):
    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\necho 'Version 2025.3.1'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("MHA_CI_COMPUTE_SANITIZER", str(tool))
    assert sanitizer.find() == str(tool) and sanitizer.version(str(tool)) == "2025.3.1"
    monkeypatch.setenv("MHA_CI_COMPUTE_SANITIZER", str(tmp_path / "missing"))
    assert sanitizer.find() is None
