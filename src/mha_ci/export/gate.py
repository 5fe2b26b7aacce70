"""The merge gate of a workflow run: every planned job must have left a passing result.

GitHub's own job status is not enough: a matrix job that never started (runner offline, cancelled,
matrix empty by mistake) leaves no failed check behind, and a required check on a job that was
skipped counts as passed. So the `gate` job downloads every job's artifact and checks, for each job
the plan listed, that

  - the artifact `result-<job id>` exists,
  - its `exit-code` (written by the workflow step around `mha-ci run`) is 0,
  - its `results.json` (mha-ci.results/1) is finished with exit_code 0 and lists that job exactly
    once, with verdict "pass",
  - and that pass is a full, pinned one: a run narrowed with `mha-ci run --select` or run with
    `--pins record` (UNPINNED) is a local check, never a merge verdict.

A plan without jobs, or one listing a job twice, is red too: a gate that judged nothing (or counted
one job for two) cannot vouch for the change.

Standard library only (and mha_ci's standard-library modules): it runs as
`python -m mha_ci.export.gate` with src/ on PYTHONPATH, with nothing installed. The artifacts are
written by jobs that ran the pull request's code, so every file is read as a regular file of
bounded size: a FIFO or a device there is red, never a gate that waits forever. Exit 0 when all pass, 1 otherwise (the contract's "a gate failed").
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from mha_ci.errors import MhaCiError
from mha_ci.export.approval import COMMAND as APPROVAL_COMMAND
from mha_ci.files import read_capped

RESULTS_SCHEMA = "mha-ci.results/1"
ARTIFACT_PREFIX = "result-"
# A run's results.json is tens of KiB (a few MiB with every failed test listed); a plan less.
MAX_RESULT_BYTES = 64 << 20


@dataclass(frozen=True)
class JobCheck:
    job_id: str
    ok: bool
    why: str


def artifact_name(job_id: str) -> str:
    return f"{ARTIFACT_PREFIX}{job_id}"


WITHHELD_FROM_FORKS = ("withheld until approved: a pull request's GPU jobs, a fork's too, run in pr-gpu.yml "
                       f"once a maintainer comments {APPROVAL_COMMAND} <sha> naming its head commit (CI guide, Trust)")


def check_job(job_id: str, artifacts: Path, same_repository: bool = True) -> JobCheck:
    folder = artifacts / artifact_name(job_id)
    if not folder.is_dir():
        if not same_repository:
            return JobCheck(job_id, False, f"no artifact {artifact_name(job_id)}: {WITHHELD_FROM_FORKS}")
        return JobCheck(job_id, False, f"no artifact {artifact_name(job_id)}: the job did not run or did not upload")
    code_file = folder / "exit-code"
    if not code_file.exists():
        return JobCheck(job_id, False, "no exit-code file: the run step did not finish")
    try:
        code = _read(code_file, "exit-code").decode(errors="replace").strip()
    except MhaCiError as exc:
        return JobCheck(job_id, False, str(exc))
    try:
        results = json.loads(_read(folder / "results.json", "results.json"))
    except MhaCiError as exc:
        return JobCheck(job_id, False, f"exit code {code}; {exc}")
    except (ValueError, RecursionError) as exc:
        return JobCheck(job_id, False, f"exit code {code}; results.json unreadable ({exc.__class__.__name__})")
    if not isinstance(results, dict) or results.get("schema") != RESULTS_SCHEMA:
        return JobCheck(job_id, False, f"results.json is not {RESULTS_SCHEMA}")
    if results.get("status") != "finished":
        return JobCheck(job_id, False, f"results.json status is {results.get('status')!r}, not 'finished'")
    entries = [j for j in results.get("jobs", ()) if isinstance(j, dict) and j.get("job_id") == job_id]
    if len(entries) > 1:
        return JobCheck(job_id, False, f"results.json lists this job {len(entries)} times")
    entry = entries[0] if entries else None
    if entry is None:
        not_run = next((n for n in results.get("not_run", ()) if isinstance(n, dict) and n.get("id") == job_id), None)
        why = f"not run: {not_run.get('reason')}" if not_run else "results.json does not list this job"
        return JobCheck(job_id, False, why)
    verdict, message = entry.get("verdict"), entry.get("message") or ""
    if verdict != "pass":
        return JobCheck(job_id, False, f"verdict {verdict}" + (f": {message}" if message else ""))
    if code != "0":
        return JobCheck(job_id, False, f"verdict pass but `mha-ci run` exited {code}")
    if results.get("exit_code") != 0:
        return JobCheck(job_id, False, f"verdict pass but results.json exit_code {results.get('exit_code')}")
    not_full = _not_a_full_pinned_pass(entry, results)
    if not_full:
        return JobCheck(job_id, False, not_full)
    return JobCheck(job_id, True, "pass" + (f": {message}" if message else ""))


def _not_a_full_pinned_pass(entry: dict, results: dict) -> str | None:
    """Why a passing entry does not count for a merge (None when it does)."""
    details = _mapping(entry.get("details"))
    message = str(entry.get("message") or "")
    if details.get("selection") or "SELECTION:" in message:
        return "narrowed with --select: a local check of some tests, not a verdict on the change"
    provenance = _mapping(results.get("provenance"))
    if provenance.get("pin_mode") != "enforce":
        return f"unpinned: the run's pin mode is {provenance.get('pin_mode')!r}, not 'enforce'"
    if details.get("pin_mismatches") or "UNPINNED" in message:
        return "unpinned: the payload ran versions other than the lock's"
    return None


def _read(path: Path, what: str) -> bytes:
    return read_capped(path, what, MAX_RESULT_BYTES)


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def run_gate(plan_file: Path, artifacts: Path, plan_result: str = "success",
             same_repository: bool = True) -> tuple[int, list[str]]:
    """(exit code, markdown lines) for the plan job's result and the downloaded artifacts.

    A skipped plan is red too: the only skip is a draft pull request, and a green gate on a run
    that checked nothing would let it merge once marked ready if that run were lost."""
    if plan_result == "skipped":
        return 1, ["## CI gate", "", "No verdict: the plan job was skipped (a draft pull request runs nothing; "
                   "marking it ready for review starts the run)."]
    if plan_result != "success":
        return 1, ["## CI gate", "", f"The plan job ended with '{plan_result}': no verdict is possible."]
    try:
        plan = json.loads(_read(Path(plan_file), "plan"))
        job_ids = [str(entry["id"]) for entry in plan["jobs"]]
    except (MhaCiError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return 1, ["## CI gate", "", f"Cannot read the plan {plan_file}: {exc}"]
    if not job_ids:
        return 1, ["## CI gate", "", f"The plan {plan_file} lists no job: a gate that judged nothing is red."]
    twice = sorted({j for j in job_ids if job_ids.count(j) > 1})
    if twice:
        return 1, ["## CI gate", "", f"The plan {plan_file} lists a job twice: {', '.join(twice)}."]
    checks = [check_job(job_id, Path(artifacts), same_repository) for job_id in job_ids]
    failed = [c for c in checks if not c.ok]
    head = f"{len(checks) - len(failed)} of {len(checks)} planned jobs passed"
    lines = ["## CI gate", "", head, ""]
    if checks:
        lines += ["| job | verdict |", "|---|---|"]
        lines += [f"| {c.job_id} | {'pass' if c.ok else 'FAIL'}: {c.why.replace('|', '/')} |" for c in checks]
    return (1 if failed else 0), lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.export.gate", description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, required=True, help="plan.json of the run (mha-ci plan --format json)")
    parser.add_argument("--artifacts", type=Path, required=True, help="folder the workflow downloaded all artifacts to")
    parser.add_argument("--plan-result", default="success", help="needs.plan.result: success | skipped | failure | cancelled")
    parser.add_argument("--summary", type=Path, default=None, help="append the markdown table here ($GITHUB_STEP_SUMMARY)")
    parser.add_argument("--same-repository", choices=("true", "false"), default="true",
                        help="false for a fork's pull request: a missing result says how its GPU jobs are approved")
    args = parser.parse_args(argv)
    code, lines = run_gate(args.plan, args.artifacts, args.plan_result, args.same_repository == "true")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.summary:
        with open(args.summary, "a") as handle:
            handle.write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
