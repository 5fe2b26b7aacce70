"""Section 3's figures: the refreshed sm90 triton-3.8 baseline against the one before it, per shape
(trimmed means), split by whether the recorded code objects changed and whether fwd_gluon ran.

    python3 docs/records/2026-12-04-h200-gluon-checks-tma-reduce/lab/refresh_deltas.py ea3c2f6
"""
import json
import statistics
import subprocess
import sys

REV = sys.argv[1] if len(sys.argv) > 1 else "ea3c2f6"
PATH = "perf_baselines/sm90/triton-3.8.json"


def load(rev):
    return json.loads(subprocess.check_output(["git", "show", f"{rev}:{PATH}"]))["results"]


old = {x["key"]: x for x in load(f"{REV}~1")}
rows = []
for x in load(REV):
    y = old.get(x["key"])
    if y:
        delta = (x["stats"]["trimmed_mean_us"] / y["stats"]["trimmed_mean_us"] - 1) * 100
        rows.append((x["key"], delta, x["code_objects"] != y["code_objects"], "fwd_gluon" in x["code_objects"]))
gluon = [r for r in rows if r[3]]
print("shapes on fwd_gluon:", len(gluon), "deltas min/max %.1f/%.1f" % (min(r[1] for r in gluon), max(r[1] for r in gluon)))
other = [r for r in rows if r[2] and not r[3]]
print("other code objects changed:", len(other), other[:5])
same = [r for r in rows if not r[2]]
print("same code objects:", len(same), "median delta %.2f, min %.1f max %.1f"
      % (statistics.median(r[1] for r in same), min(r[1] for r in same), max(r[1] for r in same)))
print("same-code beyond 3%:", [(k, round(d, 1)) for k, d, _, _ in same if abs(d) > 3])
