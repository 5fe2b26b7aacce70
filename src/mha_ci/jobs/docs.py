"""Job kind docs (docs-<arch>): what a change to documentation alone can break, checked in seconds.

Documentation is read by people and by nothing the gates run (docs/architecture.md: docs/records
is never read by src/ or tests/), so a documentation-only change cannot move a kernel test, a
code object or a timing. What it can break is the documentation itself:

- a relative link in README.md or docs/ that points at a file a clone does not have (a typo, a
  renamed guide, a file that exists only in the author's checkout: git-ignored or untracked);
- docs/ci-guide.md, generated from pipelines/ (`mha-ci export ci-guide`), edited by hand or left
  stale.

A code change can break both as well (a moved file, a changed pipelines/), so every pull request
runs this job, not only documentation-only ones. It runs no toolchain: one job per arch, no
payload, the standard library and git.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mha_ci.errors import ExitCode
from mha_ci.export import ci_guide
from mha_ci.files import write_atomic
from mha_ci.git import output_or_none
from mha_ci.jobs import JobResult
from mha_ci.jobs.context import JobContext
from mha_ci.model.types import Job

# [text](target "title") and reference definitions `[name]: target`; the target stops at blanks.
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*)?\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
CODE_SPAN = re.compile(r"`+[^`]*`+")
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class BrokenLink:
    document: str       # repository-relative, '/'
    line: int
    target: str
    why: str

    def describe(self) -> str:
        return f"{self.document}:{self.line}: {self.target}: {self.why}"


def documents(files: frozenset[str]) -> list[str]:
    """The README and every Markdown file under docs/, of the files a clone has."""
    return sorted(f for f in files if f == "README.md" or (f.startswith("docs/") and f.endswith(".md")))


def clone_files(root: Path) -> frozenset[str]:
    """The files a clone of this checkout has: git's tracked files (an untracked or ignored file is
    only in this checkout); every file on disk when this is not a git checkout."""
    listed = output_or_none(root, "ls-files", "-z", "--cached")
    if listed is not None:
        return frozenset(name for name in listed.split("\0") if name and (root / name).exists())
    return frozenset(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def link_targets(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link outside code blocks and code spans."""
    found, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            marker = stripped[:3]
            fence = None if fence == marker else (fence or marker)
            continue
        if fence:
            continue
        prose = CODE_SPAN.sub("", line)
        found += [(number, target) for target in INLINE_LINK.findall(prose)]
        reference = REFERENCE_LINK.match(prose)
        if reference:
            found.append((number, reference.group(1)))
    return found


def broken_links(root: Path, files: frozenset[str]) -> list[BrokenLink]:
    folders = {str(parent) for f in files for parent in PurePosixPath(f).parents}
    broken = []
    for document in documents(files):
        text = (root / document).read_text(encoding="utf-8", errors="replace")
        for line, target in link_targets(text):
            if SCHEME.match(target) or target.startswith("#"):
                continue          # a web address or a heading of the same page: not a file
            path = target.split("#", 1)[0].split("?", 1)[0]
            resolved = _resolve(PurePosixPath(document).parent, path)
            if resolved is None:
                broken.append(BrokenLink(document, line, target, "points outside the repository"))
            elif resolved not in files and resolved not in folders:
                why = ("exists here but a clone does not have it (untracked or git-ignored)"
                       if (root / resolved).exists() else "no such file")
                broken.append(BrokenLink(document, line, target, why))
    return broken


def _resolve(base: PurePosixPath, target: str) -> str | None:
    """The repository-relative path of `target` written in a document of folder `base`; None when
    it leaves the repository. A leading '/' is the repository root, as GitHub renders it."""
    parts: list[str] = [] if target.startswith("/") else [p for p in base.parts if p != "."]
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts) or "."


def guide_drift(ctx: JobContext) -> str | None:
    """Why docs/ci-guide.md is not what `mha-ci export ci-guide` generates; None when it is."""
    target = Path(ctx.pipeline.root) / ci_guide.GUIDE_PATH
    if not target.is_file():
        return f"{ci_guide.GUIDE_PATH} is missing: `mha-ci export ci-guide --write` writes it"
    if target.read_text() != ci_guide.render(ctx.pipeline):
        return (f"{ci_guide.GUIDE_PATH} differs from what pipelines/ generates: regenerate it with "
                "`mha-ci export ci-guide --write` (`--check` shows the difference)")
    return None


def run_job(job: Job, ctx: JobContext) -> JobResult:
    started = time.monotonic()
    root = Path(ctx.pipeline.root)
    files = clone_files(root)
    checked = documents(files)
    broken = broken_links(root, files)
    drift = guide_drift(ctx)
    lines = [f"{len(checked)} documents checked; {len(broken)} broken links"]
    lines += [f"  BROKEN {b.describe()}" for b in broken]
    lines.append(f"  STALE {drift}" if drift else f"  {ci_guide.GUIDE_PATH} is what pipelines/ generates")
    report = Path(ctx.out_dir) / "jobs" / job.id / "docs.txt"
    report.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(report, "\n".join(lines) + "\n")
    print("\n".join(lines))
    problems = ([f"{len(broken)} broken links (first: {broken[0].describe()})"] if broken else []) \
        + ([drift] if drift else [])
    if not checked:
        problems.append("no document found (README.md, docs/*.md): nothing checked is not a pass")
    details = {"documents": len(checked), "broken": [b.describe() for b in broken], "guide_stale": bool(drift)}
    timings = {"check": round(time.monotonic() - started, 3)}
    artifact = [str(report.relative_to(ctx.out_dir))]
    if problems:
        return JobResult(job_id=job.id, kind=job.kind, verdict="fail", exit_code=ExitCode.GATE_FAILED,
                         message="; ".join(problems), artifacts=artifact, timings=timings, details=details)
    return JobResult(job_id=job.id, kind=job.kind, verdict="pass", exit_code=ExitCode.OK,
                     message=f"{len(checked)} documents: every link resolves, the CI guide is current",
                     artifacts=artifact, timings=timings, details=details)
