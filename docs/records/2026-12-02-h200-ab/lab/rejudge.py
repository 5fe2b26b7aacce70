"""Re-judges this record from raw/ (run from the repository root, with mha-ci installed):

    python docs/records/2026-12-02-h200-ab/lab/rejudge.py [--out DIR]

1. The PR job of call 4 (a backward `default` BLOCK_N2 64 -> 32 plant): its verdict as stored,
   and as judged now that a same-code shape's move with unchanged host code is an A/A move (the
   plant touched only src/mha/configs, so host code was byte-identical on both sides).
2. Every same-GPU A/A judgement on record, pooled (`mha-ci perf calibrate` with several pairs):
   call 4's `--against HEAD` A/A, the same-code shapes of call 4's PR job, the A/A of
   2026-12-01-h200-backward-gate (Triton 3.4) and of 2026-12-02-h200-numerics (9 shapes), with
   the scaled 3 % plant, shapes of at least 100 us, at the --against floor.
"""
import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from mha_ci.model.loader import load_pipeline
from mha_ci.perf.compare import compare
from mha_ci.perf.config import against_policy

HERE = Path(__file__).resolve().parents[1]
RECORDS = HERE.parent
ROOT = RECORDS.parents[1]


def unpack(tgz: Path, into: Path) -> Path:
    with tarfile.open(tgz) as t:
        t.extractall(into, filter="data")
    return into


def same_code_only(base: dict, head: dict) -> tuple[dict, dict]:
    codes = {e["key"]: e.get("code_objects") for e in base["results"]}
    keep = {e["key"] for e in head["results"] if e.get("code_objects") and e.get("code_objects") == codes.get(e["key"])}
    def cut(d):
        results = [e for e in d["results"] if e["key"] in keep]
        return {**d, "results": results, "selection": {**d["selection"], "subset": "custom", "count": len(results)}}
    return cut(base), cut(head)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=HERE / "calibrate")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    c4 = unpack(HERE / "raw" / "call4-prjob-3.8.tgz", tmp / "c4")
    unpack(HERE / "raw" / "call4-aa2-3.8.tgz", tmp / "c4")
    job = c4 / "r" / "prjob" / "jobs" / "perf-sm90-triton-3.8"
    base, head = (json.loads((job / f"perf-{s}.json").read_text()) for s in ("base", "head"))
    policy = against_policy(load_pipeline(ROOT).perf)
    for unchanged in (False, True):
        c = compare(base, head, policy, unchanged_host=unchanged)
        regs = sorted((v.delta_pct, v.key) for v in c.shapes if v.status == "regression")
        imps = sorted((v.delta_pct, v.key) for v in c.shapes if v.status == "improvement")
        print(f"PR job, unchanged_host={unchanged}: {len(regs)} regressions, {len(imps)} improvements; "
              f"A/A moves: {[v.key for v in c.shapes if v.reason.startswith('A/A move')]}")
        for d, k in reversed(regs):
            print(f"  regression {d:+.2f} %  {k}  bucket {next(v.bucket for v in c.shapes if v.key == k)}")
        for d, k in imps:
            print(f"  improvement {d:+.2f} %  {k}")
    pairs = tmp / "pairs"
    pairs.mkdir()
    sb, sh = same_code_only(base, head)
    (pairs / "prjob-same-code-base.json").write_text(json.dumps(sb))
    (pairs / "prjob-same-code-head.json").write_text(json.dumps(sh))
    nm = unpack(RECORDS / "2026-12-02-h200-numerics" / "raw" / "call2-aa-3.8.tgz", tmp / "nm")
    aa2 = next((c4 / "r" / "aa2").glob("perf-*"))
    nm_aa = next((nm / "r" / "aa").glob("perf-*"))
    # that record keeps its raw documents as runs.tar.xz (docs/records/README.md)
    with tarfile.open(RECORDS / "2026-12-01-h200-backward-gate" / "runs.tar.xz") as t:
        t.extractall(tmp / "bg", filter="data")
    bg = next(p.parent for p in (tmp / "bg").rglob("against-aa-base.json"))
    runs = [aa2 / "perf-base.json", aa2 / "perf-head.json",
            pairs / "prjob-same-code-base.json", pairs / "prjob-same-code-head.json",
            bg / "against-aa-base.json", bg / "against-aa-head.json",
            nm_aa / "perf-base.json", nm_aa / "perf-head.json"]
    cmd = [sys.executable, "-m", "mha_ci", "--root", str(ROOT), "perf", "calibrate", *map(str, runs),
           "--against-floor", "--scaled-plant", "3", "--min-us", "100", "--out", str(args.out)]
    print("$ mha-ci perf calibrate <4 pairs> --against-floor --scaled-plant 3 --min-us 100 --out", args.out)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    raise SystemExit(main())
