"""Re-judge the stored report of memcheck-sm90-triton-3.8-1of2 with pipelines/known_failures.yaml as
it is in the checkout (a replay of the verdict, not a run). From the repository root:
    mkdir -p /tmp/mc1 && tar -C /tmp/mc1 -xzf docs/records/2026-12-07-h100-shipped-tree-checks/raw/call2-mc-3.8.tgz
    .venv/bin/python docs/records/2026-12-07-h100-shipped-tree-checks/lab/rejudge.py /tmp/mc1
"""
import copy
import json
import sys
from pathlib import Path

from mha_ci.jobs import JobResult
from mha_ci.jobs.memcheck import failures_of, judge
from mha_ci.model.loader import load_pipeline
from mha_ci.payloads.memcheck import apply_known

JOB = "memcheck-sm90-triton-3.8-1of2"
report = json.loads((Path(sys.argv[1]) / "r/mc/1/jobs" / JOB / "report.json").read_text())
print("as judged on the device: failures", len(failures_of(report)))
known = [{"test": k.test, "reason": k.reason} for k in load_pipeline(Path(".")).known_failures_for("sm90", "triton-3.8")]
again = copy.deepcopy(report)
for result in again["results"]:
    if result["status"] == "known":
        result["status"] = "reported"
        result.pop("known_reason", None)
apply_known(again["results"], known)
print("re-judged with", len(known), "known entries: failures", len(failures_of(again)))
verdict = JobResult(job_id=JOB, kind="memcheck", verdict="fail", exit_code=1)
judge(verdict, again, 0)   # exit 0: the payload's own exit came from the findings being re-judged here
print(verdict.verdict, "-", verdict.message)
