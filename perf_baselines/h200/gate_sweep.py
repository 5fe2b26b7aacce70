"""Gate settings (floor %, k) swept over the H200 runs 3-6: false regressions (within one lease,
PR subset, each lease against a baseline combined from the others) and the share of planted
shapes caught. Run by analyse-run3-6.sh; prints one line per setting."""
from pathlib import Path
from mha_ci.perf.combine import combine
from mha_ci.perf.compare import compare, GatePolicy
from mha_ci.perf.document import load_perf
H = Path(__file__).resolve().parent
L = {"L3": ["run3/perf-3.6-full-a.json", "run3/perf-3.6-full-b.json"], "L4": ["run4/perf-3.6-full-a-gpu0.json", "run4/perf-3.6-full-a-gpu1.json"], "L5": ["run5/perf-3.6-full-a-gpu0.json"]}
D = {r: load_perf(H / r) for rs in L.values() for r in rs}
P5, P75, A5 = load_perf(H / "run5/perf-3.6-full-planted5-dense-gpu0.json"), load_perf(H / "run6/perf-3.6-full-planted7.5-dense.json"), D["run5/perf-3.6-full-a-gpu0.json"]
PRa, PRb, PR6 = (load_perf(H / p) for p in ("run3/perf-3.6-pr-a.json", "run3/perf-3.6-pr-b.json", "run6/perf-3.6-pr.json"))
def catch(base, planted, pol):
    pct = {e["key"]: e.get("planted_pct") for e in planted["results"]}
    c = compare(base, planted, pol)
    hits = [v for v in c.shapes if pct[v.key]]
    return sum(v.status == "regression" for v in hits) / len(hits), sum(v.status == "regression" for v in c.shapes if not pct[v.key])
for floor in (2.0, 2.5, 3.0):
    for k in (2.0, 2.5, 3.0):
        pol = GatePolicy(floor_pct=floor, k=k)
        aa = compare(D["run3/perf-3.6-full-a.json"], D["run3/perf-3.6-full-b.json"], pol).summary["regression"] + compare(D["run3/perf-3.6-full-b.json"], D["run3/perf-3.6-full-a.json"], pol).summary["regression"]
        aapr = compare(PRa, PRb, pol).summary["regression"] + compare(PRb, PRa, pol).summary["regression"]
        loo = 0
        for lease, runs in L.items():
            base = combine([D[r] for o, rs in L.items() if o != lease for r in rs])
            loo += sum(compare(base, D[r], pol).summary["regression"] for r in runs)
        all5 = combine(list(D.values()))
        pr6 = compare(all5, PR6, pol).summary["regression"]
        c5own, f5 = catch(A5, P5, pol)
        c5x, _ = catch(combine([D[r] for o in ("L3", "L4") for r in L[o]]), P5, pol)
        c75, f75 = catch(all5, P75, pol)
        print(f"- floor {floor} k {k}: AA-in-lease {aa}/462, AA-PR {aapr}/60, LOO {loo}/1155, PR6 {pr6}/30 | catch5 own {c5own:.3f} (fp {f5}), catch5 x-lease {c5x:.3f}, catch7.5 vs combined {c75:.3f} (fp {f75})")
