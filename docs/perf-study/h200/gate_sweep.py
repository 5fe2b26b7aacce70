"""Gate settings (floor %, k) swept over the H200 runs 3-6: false regressions (within one lease,
PR subset, each lease against a baseline combined from the others) and the share of planted
shapes caught. Run by analyse-run3-6.sh; prints one line per setting."""
from cross_lease import H, LEASES, combined_without, load_runs

from mha_ci.perf.calibrate import planted_catch
from mha_ci.perf.compare import GatePolicy, compare
from mha_ci.perf.document import load_perf

docs = load_runs()
full_a, full_b = docs["run3/perf-3.6-full-a.json"], docs["run3/perf-3.6-full-b.json"]
pr_a, pr_b, pr_6 = (load_perf(H / p) for p in ("run3/perf-3.6-pr-a.json", "run3/perf-3.6-pr-b.json", "run6/perf-3.6-pr.json"))
a_5, planted_5 = docs["run5/perf-3.6-full-a-gpu0.json"], load_perf(H / "run5/perf-3.6-full-planted5-dense-gpu0.json")
planted_75 = load_perf(H / "run6/perf-3.6-full-planted7.5-dense.json")


def regressions(base, cand, policy) -> int:
    return compare(base, cand, policy).summary["regression"]


for floor in (2.0, 2.5, 3.0):
    for k in (2.0, 2.5, 3.0):
        pol = GatePolicy(floor_pct=floor, k=k)
        aa = regressions(full_a, full_b, pol) + regressions(full_b, full_a, pol)
        aapr = regressions(pr_a, pr_b, pol) + regressions(pr_b, pr_a, pol)
        loo = sum(regressions(combined_without(docs, lease, pol.invalid_noise_pct)[0], docs[r], pol)
                  for lease, runs in LEASES.items() for r in runs)
        every_run = combined_without(docs, None, pol.invalid_noise_pct)[0]
        pr6 = regressions(every_run, pr_6, pol)
        own5 = planted_catch(a_5, planted_5, pol)
        cross5 = planted_catch(combined_without(docs, "L5", pol.invalid_noise_pct)[0], planted_5, pol)
        c75 = planted_catch(every_run, planted_75, pol)
        print(f"- floor {floor} k {k}: AA-in-lease {aa}/462, AA-PR {aapr}/60, LOO {loo}/1155, PR6 {pr6}/30 | "
              f"catch5 own {own5['catch_rate']:.3f} (fp {len(own5['unplanted_false_regressions'])}), "
              f"catch5 x-lease {cross5['catch_rate']:.3f}, catch7.5 vs combined {c75['catch_rate']:.3f} "
              f"(fp {len(c75['unplanted_false_regressions'])})")
