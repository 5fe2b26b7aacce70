"""The gate on H200 runs made after it was set on runs 3-6: leases 7, 8 and 9 (the data on which
k went from 2.5 to 2: a table of neighbouring settings), then lease 10, measured after that
choice, as the check. Per lease: A/A false regressions between its two GPUs and against the
committed baseline (perf_baselines/sm90/triton-3.6.json, combined from runs 3-5: the perf job's
own case), and the share of planted shapes caught, against the same GPU's unplanted run and
against the committed baseline. Run 8's planted runs are left out: their plant was the per-shape
corrected one that was taken back (run7.sh). Run by analyse-run7-11.sh; prints markdown."""
import itertools

from cross_lease import LEASES, ROOT, H, combined_without

from mha_ci.perf.calibrate import planted_catch
from mha_ci.perf.compare import GatePolicy, compare
from mha_ci.perf.config import gate_policy, load_perf_file
from mha_ci.perf.document import load_perf

CHOICE, CHECK = (7, 8, 9), (10,)
A_RUNS = {n: [f"run{n}/perf-3.6-full-a-gpu{g}.json" for g in (0, 1)] for n in CHOICE + CHECK}
# (planted run, the same GPU's unplanted run, lease)
PLANTED = [(f"run{n}/perf-3.6-full-planted{pct}-dense-gpu{g}.json", f"run{n}/perf-3.6-full-a-gpu{g}.json", n, pct)
           for n, g, pct in ((7, 0, "5"), (7, 1, "5"), (9, 0, "5"), (9, 1, "7.5"), (10, 0, "5"), (10, 1, "5"))]
SETTINGS = [(f, k) for f in (2.0, 2.5, 3.0) for k in (2.0, 2.5, 3.0)]


def pooled(catches: list[dict]) -> str:
    if not catches:
        return "-"
    caught, total = sum(c["caught"] for c in catches), sum(c["planted_shapes"] for c in catches)
    return f"{caught}/{total} ({100 * caught / total:.1f} %)"


def judge(leases, pol, docs, baseline) -> dict:
    pairs = [(a, b) for n in leases for a, b in itertools.permutations(A_RUNS[n], 2)]
    runs = [r for n in leases for r in A_RUNS[n]]
    out = {"same": [compare(docs[a], docs[b], pol).summary["regression"] for a, b in pairs],
           "base": [compare(baseline, docs[r], pol).summary["regression"] for r in runs]}
    for pct in ("5", "7.5"):
        mine = [p for p in PLANTED if p[2] in leases and p[3] == pct]
        out[f"own{pct}"] = [planted_catch(docs[a], docs[p], pol) for p, a, _, _ in mine]
        out[f"base{pct}"] = [planted_catch(baseline, docs[p], pol) for p, _, _, _ in mine]
    out["fp"] = sum(len(c["unplanted_false_regressions"]) for key in ("own5", "base5", "own7.5", "base7.5")
                    for c in out[key])
    return out


def row(label: str, j: dict) -> str:
    return (f"| {label} | {sum(j['same'])} of {231 * len(j['same'])} ({max(j['same'])}) | {sum(j['base'])} of "
            f"{231 * len(j['base'])} ({max(j['base'])}) | {pooled(j['own5'])} | {pooled(j['base5'])} | "
            f"{pooled(j['own7.5'])} / {pooled(j['base7.5'])} | {j['fp']} |")


HEADER = ("| gate | A/A same lease: false regressions (worst pair) | A vs committed baseline: false "
          "regressions (worst run) | planted 5 % caught, same GPU's A | planted 5 % caught, committed "
          "baseline | planted 7.5 % caught, same GPU's A / committed baseline | unplanted false regressions |\n"
          "|---|---|---|---|---|---|---|")


def main() -> None:
    committed = gate_policy(load_perf_file(ROOT))
    docs = {r: load_perf(H / r) for runs in A_RUNS.values() for r in runs}
    docs.update({p: load_perf(H / p) for p, _, _, _ in PLANTED})
    baseline = load_perf(ROOT / "perf_baselines" / "sm90" / "triton-3.6.json")
    print("# The gate on H200 runs 7-10 (Triton 3.6, full set, 231 shapes, 191 dense ones planted)\n")
    print(f"Committed gate: floor {committed.floor_pct} %, k {committed.k}. Each run is one machine start "
          "(a lease) with two GPUs: per GPU an unplanted run A, then the planted run.\n")
    print("## Runs 7-9: the committed gate and its neighbours\n")
    print("k went from 2.5 to 2 after this table was made.\n")
    print(HEADER)
    for floor, k in SETTINGS:
        pol = GatePolicy(floor_pct=floor, k=k, invalid_noise_pct=committed.invalid_noise_pct)
        mark = " (committed)" if (floor, k) == (committed.floor_pct, committed.k) else ""
        print(row(f"floor {floor}, k {k}{mark}", judge(CHOICE, pol, docs, baseline)))
    print("\n## Run 10, measured after the choice: the committed gate\n")
    print(HEADER)
    print(row(f"floor {committed.floor_pct}, k {committed.k}", judge(CHECK, committed, docs, baseline)))
    print("\n## Every run, committed gate\n")
    print(HEADER)
    print(row(f"floor {committed.floor_pct}, k {committed.k}", judge(CHOICE + CHECK, committed, docs, baseline)))
    every_lease(committed, docs)
    print("\nPer planted run, committed gate:\n")
    for p, a, _, _ in PLANTED:
        for name, base in ((a, docs[a]), ("committed baseline", baseline)):
            c = planted_catch(base, docs[p], committed)
            r = c["realised_delta_pct"]
            print(f"- {p} vs {name}: {c['caught']} of {c['planted_shapes']}, realised median {r['median']} % "
                  f"(min {r['min']}, p90 {r['p90']})")


def every_lease(policy: GatePolicy, docs: dict) -> None:
    """Leave one lease out: each lease's A runs (and its 5 % planted runs, judged against the
    same GPU's A run's lease) against a baseline combined from the A runs of every other lease."""
    leases = {**LEASES, **{f"L{n}": runs for n, runs in A_RUNS.items()}}
    docs = {**docs, **{r: load_perf(H / r) for runs in LEASES.values() for r in runs}}
    print("\n## Each lease against a baseline combined from every other lease (L3-L5, L7-L10)\n")
    print("| lease | run | false regressions of 231 | planted 5 % caught |\n|---|---|---|---|")
    caught = total = 0
    for lease, runs in leases.items():
        base, _ = combined_without(docs, lease, policy.invalid_noise_pct, leases)
        for run in runs:
            planted = [p for p, a, _, pct in PLANTED if a == run and pct == "5"]
            catch = [planted_catch(base, docs[p], policy) for p in planted]
            caught += sum(c["caught"] for c in catch)
            total += sum(c["planted_shapes"] for c in catch)
            print(f"| {lease} | {run} | {compare(base, docs[run], policy).summary['regression']} | {pooled(catch)} |")
    print(f"\nPlanted 5 %, every lease against the others: {caught}/{total} ({100 * caught / total:.1f} %).")


if __name__ == "__main__":
    main()
