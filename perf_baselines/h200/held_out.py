"""The gate on held-out H200 runs 7-9 (three more leases, after the gate was set on runs 3-6):
A/A false regressions between the two GPUs of each lease and against the committed baseline
(perf_baselines/sm90/triton-3.6.json, combined from runs 3-5: the perf job's own case), and the
share of planted shapes caught, for the committed gate and its neighbours. Run 8's planted runs
are left out: their plant was the per-shape corrected one that was taken back (run7.sh).
Run by analyse-run7-9.sh; prints markdown."""
import itertools

from cross_lease import ROOT, H

from mha_ci.perf.calibrate import planted_catch
from mha_ci.perf.compare import GatePolicy, compare
from mha_ci.perf.config import gate_policy, load_perf_file
from mha_ci.perf.document import load_perf

A_RUNS = {lease: [f"run{n}/perf-3.6-full-a-gpu{g}.json" for g in (0, 1)] for lease, n in (("L7", 7), ("L8", 8), ("L9", 9))}
PLANTED = [("run7/perf-3.6-full-planted5-dense-gpu0.json", "run7/perf-3.6-full-a-gpu0.json"),
           ("run7/perf-3.6-full-planted5-dense-gpu1.json", "run7/perf-3.6-full-a-gpu1.json"),
           ("run9/perf-3.6-full-planted5-dense-gpu0.json", "run9/perf-3.6-full-a-gpu0.json"),
           ("run9/perf-3.6-full-planted7.5-dense-gpu1.json", "run9/perf-3.6-full-a-gpu1.json")]
SETTINGS = [(f, k) for f in (2.0, 2.5, 3.0) for k in (2.0, 2.5, 3.0)]


def main() -> None:
    committed = gate_policy(load_perf_file(ROOT))
    docs = {r: load_perf(H / r) for runs in A_RUNS.values() for r in runs}
    docs.update({p: load_perf(H / p) for p, _ in PLANTED})
    baseline = load_perf(ROOT / "perf_baselines" / "sm90" / "triton-3.6.json")
    pairs = [(a, b) for runs in A_RUNS.values() for a, b in itertools.permutations(runs, 2)]
    print("# Gate on held-out runs 7-9 (Triton 3.6, full set, 231 shapes per run)\n")
    print(f"Committed gate: floor {committed.floor_pct} %, k {committed.k}. Leases L7, L8, L9: one machine "
          "start each, two GPUs each.\n")
    print("| floor % | k | A/A same lease: false regressions (worst pair) | A vs committed baseline: "
          "false regressions (worst run) | planted 5 % caught, own GPU's A | planted 5 % caught, committed "
          "baseline | planted 7.5 % caught, own A / baseline | unplanted false regressions |")
    print("|---|---|---|---|---|---|---|---|")
    for floor, k in SETTINGS:
        pol = GatePolicy(floor_pct=floor, k=k, invalid_noise_pct=committed.invalid_noise_pct)
        same = [compare(docs[a], docs[b], pol).summary["regression"] for a, b in pairs]
        vs_base = [compare(baseline, docs[r], pol).summary["regression"] for runs in A_RUNS.values() for r in runs]
        own5 = [planted_catch(docs[a], docs[p], pol) for p, a in PLANTED[:3]]
        base5 = [planted_catch(baseline, docs[p], pol) for p, _ in PLANTED[:3]]
        own75, base75 = (planted_catch(docs[PLANTED[3][1]], docs[PLANTED[3][0]], pol),
                         planted_catch(baseline, docs[PLANTED[3][0]], pol))
        every = own5 + base5 + [own75, base75]
        fp = sum(len(c["unplanted_false_regressions"]) for c in every)

        def pooled(cs):
            caught, total = sum(c["caught"] for c in cs), sum(c["planted_shapes"] for c in cs)
            return f"{caught}/{total} ({100 * caught / total:.1f} %)"

        mark = " (committed)" if (floor, k) == (committed.floor_pct, committed.k) else ""
        print(f"| {floor}{mark} | {k} | {sum(same)} of {231 * len(same)} ({max(same)}) | {sum(vs_base)} of "
              f"{231 * len(vs_base)} ({max(vs_base)}) | {pooled(own5)} | {pooled(base5)} | "
              f"{pooled([own75])} / {pooled([base75])} | {fp} |")
    print("\nPer planted run, committed gate:\n")
    for p, a in PLANTED:
        for name, base in ((a, docs[a]), ("committed baseline", baseline)):
            c = planted_catch(base, docs[p], committed)
            print(f"- {p} vs {name}: {c['caught']} of {c['planted_shapes']}, realised median "
                  f"{c['realised_delta_pct']['median']} % (min {c['realised_delta_pct']['min']}, p90 "
                  f"{c['realised_delta_pct']['p90']})")


if __name__ == "__main__":
    main()
