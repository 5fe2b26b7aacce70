"""Re-judge the raw memcheck runs of this record with the checkout's parser and verdict rules.

    python3 docs/records/2026-12-02-h200-memcheck/lab/rejudge.py      (from the checkout root)

For each shard report in raw/*.tgz: the self-tests as the current parser reads the logged plant
output, each problem's status after pipelines/known_failures.yaml, and the job's verdict.
"""
import io
import json
import sys
import tarfile
from pathlib import Path

import yaml

sys.path.insert(0, "src")
from mha_ci.jobs import JobResult  # noqa: E402
from mha_ci.jobs.memcheck import judge  # noqa: E402
from mha_ci.payloads import memcheck, sanitizer  # noqa: E402

RAW = Path(__file__).resolve().parents[1] / "raw"
known = yaml.safe_load(Path("pipelines/known_failures.yaml").read_text())["known_failures"]
for archive in sorted(RAW.glob("call*-mc-*.tgz")):
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        for name in sorted(n for n in members if n.endswith("/report.json") and "/memcheck-" in n):
            report = json.load(tar.extractfile(members[name]))
            logs = name.rsplit("/", 1)[0] + "/logs/"
            for test in report["self_tests"]:
                log = tar.extractfile(members[logs + test["tool"] + ".log"]).read().decode()
                child = log.split("$ ")[1]            # the first child of a tool is its self-test
                code = int(child.rsplit("(exit ", 1)[1].split(")")[0])
                section = next(s for s in sanitizer.parse(child).sections if s.label == f"plant-{test['tool']}")
                named = [r for r in section.reports if r.kernel == memcheck.PLANTED_KERNELS[test["tool"]]]
                test["status"] = "seen" if code == sanitizer.ERROR_EXIT and named else "missed"
                test["why"] = "" if named else "plant not reported"
            toolchain = "triton-" + name.split("triton-")[1][:3]
            memcheck.apply_known(report["results"], [k for k in known if k["toolchain"] == toolchain])
            result = JobResult(job_id=name, kind="memcheck", verdict="fail", exit_code=1)
            judge(result, report, 0)
            counts = {}
            for r in report["results"]:
                counts[r["status"]] = counts.get(r["status"], 0) + 1
            print(f"{archive.name} {name.split('/')[-2]}: {result.verdict.upper()}  "
                  f"self-tests {[(t['tool'], t['status']) for t in report['self_tests']]}  {counts}  "
                  f"wall {report['wall_s']:.0f} s (warm-up {report.get('warm_s', 0):.0f} s)")
