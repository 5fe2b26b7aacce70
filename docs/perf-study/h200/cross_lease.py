"""False regressions between H200 leases: every ordered pair of single 3.6 full-set runs, then
each lease's runs against a baseline combined from the other leases (mha_ci.perf.held_out), then
the planted runs judged as the gate would. Run by analyse-run3-6.sh; prints markdown.
gate_sweep.py and held_out.py reuse the lease table (they import this file from its folder:
run them as `PYTHONPATH=src python3 docs/perf-study/h200/<script>.py`)."""
import itertools
from pathlib import Path

from mha_ci.perf.calibrate import planted_catch
from mha_ci.perf.compare import compare
from mha_ci.perf.config import gate_policy, load_perf_file
from mha_ci.perf.document import load_perf
from mha_ci.perf.held_out import combined_without as _combined_without
from mha_ci.perf.held_out import leave_one_group_out

ROOT = Path(__file__).resolve().parents[3]
H = ROOT / "docs" / "perf-study" / "h200"
LEASES = {"L3": ["run3/perf-3.6-full-a.json", "run3/perf-3.6-full-b.json"],
          "L4": ["run4/perf-3.6-full-a-gpu0.json", "run4/perf-3.6-full-a-gpu1.json"],
          "L5": ["run5/perf-3.6-full-a-gpu0.json"]}
PLANTED = (("run5/perf-3.6-full-planted5-dense-gpu0.json", "L5"), ("run6/perf-3.6-full-planted7.5-dense.json", None))
LEASE_OF = {run: lease for lease, runs in LEASES.items() for run in runs}


def load_runs() -> dict:
    return {run: load_perf(H / run) for run in LEASE_OF}


def combined_without(docs: dict, lease: str | None, max_noise_pct: float,
                     leases: dict = LEASES) -> tuple[dict, list[str]]:
    """A baseline combined from every lease's runs but `lease`'s, and the runs it was made of."""
    return _combined_without(docs, leases, lease, max_noise_pct)


def main() -> None:
    policy = gate_policy(load_perf_file(ROOT))
    docs = load_runs()
    print("# 3.6 full set: false calls between H200 leases\n")
    print(f"Gate: floor {policy.floor_pct} %, k {policy.k}. 231 shapes per run; every run is the same build.\n")
    print("## Single run as the baseline\n")
    print("| baseline | candidate | same lease | regressions | improvements | invalid |\n|---|---|---|---|---|---|")
    for a, b in itertools.permutations(docs, 2):
        s = compare(docs[a], docs[b], policy).summary
        print(f"| {a} | {b} | {'yes' if LEASE_OF[a] == LEASE_OF[b] else 'no'} | {s['regression']} | "
              f"{s['improvement']} | {s['invalid']} |")
    print("\n## Baseline combined from the other leases\n")
    print("| candidate | baseline from | regressions | improvements | invalid |\n|---|---|---|---|---|")
    total = calls = 0
    for row in leave_one_group_out(docs, LEASES, policy):
        s = row["summary"]
        total += sum(s.values())
        calls += s["regression"]
        print(f"| {row['run']} | {', '.join(row['baseline_from'])} | {s['regression']} | {s['improvement']} | {s['invalid']} |")
    print(f"\nFalse regressions against a combined baseline of other leases: {calls} of {total} shape judgements.")
    print("\n## Planted runs judged as the gate would, against a baseline of other leases\n")
    print("| planted run | nominal % | baseline from | planted shapes caught | unplanted false regressions |\n"
          "|---|---|---|---|---|")
    for run, own in PLANTED:
        planted = load_perf(H / run)
        base, others = combined_without(docs, own, policy.invalid_noise_pct)
        p = planted_catch(base, planted, policy)
        print(f"| {run} | {planted['provenance'].get('planted_slowdown_pct')} | {len(others)} runs of "
              f"{', '.join(sorted({LEASE_OF[r] for r in others}))} | {p['caught']} of {p['planted_shapes']} "
              f"({100 * p['catch_rate']:.1f} %) | {len(p['unplanted_false_regressions'])} |")


if __name__ == "__main__":
    main()
