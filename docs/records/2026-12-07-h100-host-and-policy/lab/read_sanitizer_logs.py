"""Read the two memcheck shards' raw sanitizer logs of a job the call limit cut before its verdict
(no report.json): per tool, which problems finished, which had reports, and the initcheck ones
set against pipelines/known_failures.yaml for sm90 / triton-3.8. A reading, not the job's verdict
(its judging did not run). A problem counts by its first section; where a child reported, the
payload re-ran the later problems in a fresh child, so a cut log may hold no re-run for them. From the repository root:
    mkdir -p /tmp/mc && tar -C /tmp/mc -xzf docs/records/2026-12-07-h100-host-and-policy/raw/mc-3.8.tgz
    .venv/bin/python docs/records/2026-12-07-h100-host-and-policy/lab/read_sanitizer_logs.py /tmp/mc
"""
import json
import sys
from pathlib import Path

from mha_ci.model.loader import load_pipeline
from mha_ci.payloads import sanitizer

root = Path(sys.argv[1])
known = {k.test for k in load_pipeline(Path(".")).known_failures_for("sm90", "triton-3.8")}
for shard in (1, 2):
    logs = root / f"r/mc/{shard}/jobs/memcheck-sm90-triton-3.8-{shard}of2/logs"
    labels = list(json.loads((logs / "problems.json").read_text()))
    for tool in ("memcheck", "initcheck"):
        parsed = sanitizer.parse((logs / f"{tool}.log").read_text())
        first = {}
        for s in parsed.sections:
            if s.finished or s.reports:
                first.setdefault(s.label, s)
        # reported in any child's section (a later child re-runs the problems after a report)
        reported = sorted({s.label for s in parsed.sections if s.reports and s.label in labels})
        plants = sorted(label for label, s in first.items() if s.reports and label not in labels)
        missing = [label for label in labels if label not in first]
        print(f"shard {shard} {tool}: {sum(label in first for label in labels)} of {len(labels)} problems ran, "
              f"{len(reported)} with reports (self-tests reporting: {plants}), "
              f"{len(parsed.outside)} reports outside problems; not run: {missing or 'none'}")
        if tool == "initcheck":
            entries = {f"initcheck::{label}" for label in reported}
            mine = {k for k in known if k.startswith("initcheck::") and k.split("::")[1] in labels}
            print(f"  reported and listed: {len(entries & mine)}; reported, not listed: {sorted(entries - mine)}; "
                  f"listed, not reported: {sorted(mine - entries)}")
            for label in reported:
                r = next(s for s in parsed.sections if s.label == label and s.reports).reports[0]
                print(f"    {label}: first report: {r.headline[:90]} | {r.kernel[:40]}")
