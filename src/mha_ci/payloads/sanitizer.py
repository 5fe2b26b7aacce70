"""compute-sanitizer: where it is, how it is started, and what its output says.

Standard library only, so the parsing is tested without a GPU (tests/mha_ci/payloads/).

The memcheck payload runs a child Python process under `compute-sanitizer --tool T`. The child
prints one marker line before and after each problem it launches; the sanitizer writes its
reports to the same stdout, so every report lies between the markers of the problem whose
kernels it saw (each problem ends in a device synchronize before its end marker, and the
sanitizer prints a kernel's reports when that kernel completes).

The tools and why each applies to Triton kernels:
- memcheck: out-of-bounds and misaligned global/shared accesses, the class of a partial final
  tile read past the sequence. Applies to every kernel.
- initcheck: reads of device memory nothing has written. torch.empty hands out uninitialised
  memory, so a kernel that reads an output or workspace before writing it (a dQ accumulator not
  zeroed, an lse copy read before its store) is found here and nowhere else. Applies to every kernel.
- synccheck: barriers reached by part of a block or a warp. Triton emits block-wide barriers and,
  in the warp-specialized forward, named barriers and mbarriers between warp groups, so a
  miscompiled partition shows here. Applies to every kernel.
- racecheck: shared-memory hazards between threads. Not run: see mha_ci.jobs.memcheck.TOOLS.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# The sanitizer's exit status when it reported anything (chosen to be none of the payload codes).
ERROR_EXIT = 97
MARKER = "@@mha-memcheck"
PREFIX = "========="
# Lines of a report kept in results (the kind of access, where, which thread, which address).
FIRST_LINES = 6
_NOT_A_REPORT = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
                 "Target application returned", "This tool is", "Saved host backtrace")
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
_AT = re.compile(r"^\s*at\s+(?:0x[0-9a-fA-F]+\s+in\s+)?(\S+)")
_VERSION = re.compile(r"(\d{4}\.\d+\.\d+)")


def find() -> str | None:
    """The compute-sanitizer binary: $MHA_CI_COMPUTE_SANITIZER, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin."""
    explicit = os.environ.get("MHA_CI_COMPUTE_SANITIZER")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    on_path = shutil.which("compute-sanitizer")
    if on_path:
        return on_path
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            candidate = Path(home) / "bin" / "compute-sanitizer"
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def version(binary: str) -> str:
    """The sanitizer's release (e.g. "2025.3.1"), or its first output line when it has no such number."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=False)
    text = out.stdout + out.stderr
    found = _VERSION.search(text)
    return found.group(1) if found else (text.strip().splitlines() or ["unknown"])[-1]


def command(binary: str, tool: str) -> list[str]:
    """The sanitizer's argument list before the child's own command."""
    args = [binary, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "20",
            "--target-processes", "all",
            # A failed CUDA API call is not a memory error, and Triton 3.8's loader makes one it
            # tolerates on every kernel load (cuFuncSetAttribute: invalid argument); a kernel that
            # faults still shows as its own report and as a child that stopped early.
            "--report-api-errors", "no"]
    if tool == "memcheck":
        # the caching allocator is off in the child, so torch frees every tensor; a leak report
        # would be torch's, not a kernel's
        args += ["--leak-check", "no"]
    return args


def begin_line(label: str) -> str:
    return f"{MARKER} begin {label}"


def end_line(label: str, info: str) -> str:
    return f"{MARKER} end {label} {info}"


@dataclass
class Report:
    """One sanitizer report: its headline ("Invalid __global__ read of size 4 bytes"), the kernel
    it names and its first lines."""

    headline: str
    kernel: str = ""
    lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"headline": self.headline, "kernel": self.kernel, "lines": self.lines}


@dataclass
class Section:
    """What happened between one problem's begin marker and the next marker."""

    label: str
    finished: bool = False
    info: str = ""                    # the end marker's rest (the child's JSON)
    reports: list[Report] = field(default_factory=list)


@dataclass
class Parsed:
    sections: list[Section]
    outside: list[Report]             # reports before the first marker or after an end marker
    summary_errors: int | None        # the sanitizer's ERROR SUMMARY count; None when it printed none

    @property
    def report_count(self) -> int:
        return len(self.outside) + sum(len(s.reports) for s in self.sections)


def parse(text: str) -> Parsed:
    sections: list[Section] = []
    outside: list[Report] = []
    current: Section | None = None
    report: Report | None = None
    summary: int | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith(MARKER + " "):
            report = None
            kind, _, rest = line[len(MARKER) + 1:].partition(" ")
            label, _, info = rest.partition(" ")
            if kind == "begin":
                current = Section(label=label)
                sections.append(current)
            elif kind == "end" and current is not None and current.label == label:
                current.finished, current.info = True, info
                current = None
            continue
        if not line.startswith(PREFIX):
            continue
        body = line[len(PREFIX):]
        found = _SUMMARY.search(body)
        if found:
            # the first is the count; a second ("N errors were not printed") says how many the
            # print limit hid
            summary = int(found.group(1)) if summary is None else summary
            report = None
            continue
        if not body.strip():
            report = None
            continue
        if body.startswith("  "):                 # a report's detail line (its headline has one space)
            if report is not None and len(report.lines) < FIRST_LINES:
                report.lines.append(body.strip())
                at = _AT.match(body)
                if at and not report.kernel:
                    report.kernel = _kernel_name(at.group(1))
            continue
        headline = body.strip()
        if headline.startswith(_NOT_A_REPORT):
            report = None
            continue
        report = Report(headline=headline, lines=[headline])
        (current.reports if current is not None else outside).append(report)
    return Parsed(sections=sections, outside=outside, summary_errors=summary)


def _kernel_name(location: str) -> str:
    """`attn_fwd+0x1a0`, `/src/mha/kernels/forward.py:120:attn_fwd` or a mangled name: the function."""
    name = location.split("+", 1)[0]
    if ":" in name:
        name = name.rsplit(":", 1)[-1] or name
    return name
