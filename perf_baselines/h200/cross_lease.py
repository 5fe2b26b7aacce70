"""False regressions between H200 leases: every ordered pair of single 3.6 full-set runs, then
each lease's runs against a baseline combined from the other leases (mha_ci.perf.combine).
Run by analyse-run3-6.sh; prints markdown."""
import itertools
from pathlib import Path

from mha_ci.perf.combine import combine
from mha_ci.perf.compare import compare
from mha_ci.perf.config import gate_policy, load_perf_file
from mha_ci.perf.document import load_perf

ROOT = Path(__file__).resolve().parents[2]
H = ROOT / "perf_baselines" / "h200"
LEASES = {"L3": ["run3/perf-3.6-full-a.json", "run3/perf-3.6-full-b.json"],
          "L4": ["run4/perf-3.6-full-a-gpu0.json", "run4/perf-3.6-full-a-gpu1.json"],
          "L5": ["run5/perf-3.6-full-a-gpu0.json"]}
policy = gate_policy(load_perf_file(ROOT))
docs = {run: load_perf(H / run) for runs in LEASES.values() for run in runs}
lease_of = {run: lease for lease, runs in LEASES.items() for run in runs}

print("# 3.6 full set: false calls between H200 leases\n")
print(f"Gate: floor {policy.floor_pct} %, k {policy.k}. 231 shapes per run; every run is the same build.\n")
print("## Single run as the baseline\n")
print("| baseline | candidate | same lease | regressions | improvements | invalid |\n|---|---|---|---|---|---|")
for a, b in itertools.permutations(docs, 2):
    s = compare(docs[a], docs[b], policy).summary
    print(f"| {a} | {b} | {'yes' if lease_of[a] == lease_of[b] else 'no'} | {s['regression']} | "
          f"{s['improvement']} | {s['invalid']} |")
print("\n## Baseline combined from the other leases\n")
print("| candidate | baseline from | regressions | improvements | invalid |\n|---|---|---|---|---|")
total = calls = 0
for lease, runs in LEASES.items():
    others = [r for other, rs in LEASES.items() if other != lease for r in rs]
    base = combine([docs[r] for r in others], names=others, max_noise_pct=policy.invalid_noise_pct)
    for run in runs:
        s = compare(base, docs[run], policy).summary
        total += sum(s.values())
        calls += s["regression"]
        print(f"| {run} | {', '.join(others)} | {s['regression']} | {s['improvement']} | {s['invalid']} |")
print(f"\nFalse regressions against a combined baseline of other leases: {calls} of {total} shape judgements.")

print("\n## Planted runs judged as the gate would, against a baseline of other leases\n")
print("| planted run | nominal % | baseline from | planted shapes caught | unplanted false regressions |\n|---|---|---|---|---|")
for run, own in (("run5/perf-3.6-full-planted5-dense-gpu0.json", "L5"), ("run6/perf-3.6-full-planted7.5-dense.json", None)):
    planted = load_perf(H / run)
    others = [r for lease, rs in LEASES.items() if lease != own for r in rs]
    base = combine([docs[r] for r in others], names=others, max_noise_pct=policy.invalid_noise_pct)
    pct = {e["key"]: e.get("planted_pct") or 0.0 for e in planted["results"]}
    c = compare(base, planted, policy)
    hits = [v for v in c.shapes if pct[v.key]]
    caught = sum(v.status == "regression" for v in hits)
    false = sum(v.status == "regression" for v in c.shapes if not pct[v.key])
    print(f"| {run} | {planted['provenance'].get('planted_slowdown_pct')} | {len(others)} runs of "
          f"{', '.join(sorted({lease_of[r] for r in others}))} | {caught} of {len(hits)} ({100 * caught / len(hits):.1f} %) | {false} |")
