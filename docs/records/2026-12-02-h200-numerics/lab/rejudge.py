"""Re-judge this record's raw runs with the checkout's numerics classifier and gate, and print the
tables of its README.

    python3 docs/records/2026-12-02-h200-numerics/lab/rejudge.py      (from the checkout root)
"""
import io
import json
import statistics
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, "src")
from mha_ci.model.loader import load_pipeline  # noqa: E402
from mha_ci.perf.compare import compare  # noqa: E402
from mha_ci.perf.config import against_policy, gate_policy  # noqa: E402
from mha_ci.perf.document import parse_perf  # noqa: E402

RAW = Path(__file__).resolve().parents[1] / "raw"
pipeline = load_pipeline(Path("."))


def docs_in(archive: str, suffix: str) -> dict[str, dict]:
    """The perf documents of the step the archive is named after. A machine kept /tmp/r between
    the calls of one lease, so an archive can also hold earlier steps' folders of the same name:
    the step's own log says which folder its run wrote ("reports in ..." / "wrote ...")."""
    with tarfile.open(RAW / archive) as tar:
        step = archive.split("-")[1]
        log = tar.extractfile(f"{step}.log").read().decode()
        marker = "reports in " if "reports in " in log else "wrote "
        folder = log.rsplit(marker, 1)[1].split()[0].removeprefix("/tmp/")
        folder = folder if not folder.endswith(".json") else folder.rsplit("/", 1)[0]
        return {m.name: parse_perf(tar.extractfile(m).read(), m.name) for m in tar.getmembers()
                if m.isfile() and m.name.startswith(folder + "/") and m.name.endswith(suffix)
                and m.name.rsplit("/", 1)[-1].startswith("perf")}


def against(archive: str) -> None:
    docs = docs_in(archive, ".json")
    base = next(d for n, d in docs.items() if n.endswith("perf-base.json"))
    head = next(d for n, d in docs.items() if n.endswith("perf-head.json"))
    c = compare(base, head, against_policy(pipeline.perf))
    print(f"\n### {archive}: numerics {c.numerics_summary}; gate {'RED' if c.gate_failed else 'green'}"
          f" ({'; '.join(f[:90] for f in c.failures[:3]) or 'no failure'})")
    print("| shape | pass | same code (timed kernels) | perf | numerics | worst output, ratio of rms_rel | max ulp |")
    print("|---|---|---|---|---|---|---|")
    for v in sorted(c.shapes, key=lambda v: (v.pass_, v.key)):
        n = v.numerics
        print(f"| `{v.key}` | {v.pass_} | {'yes' if v.same_code else 'no'} | {v.status} {v.delta_pct:+.1f} % | "
              f"{n.class_} | {n.worst_output} x{n.worst_ratio:.3f} | {n.max_ulp} |")
    return c


print("## The --against runs (perf.yaml numerics.less_accurate_factor "
      f"{pipeline.perf.numerics.less_accurate_factor:g})")
runs = {}
for archive in ("call1-stages-3.8.tgz", "call2-aa-3.8.tgz", "call4-blockn-3.8.tgz", "call4-acc-3.8.tgz",
                "call3-blockn-3.4.tgz", "call3-acc-3.4.tgz", "call2-blockn-3.8.tgz", "call2-acc-3.8.tgz"):
    runs[archive] = against(archive)

floor = pipeline.perf.numerics.error_floor
print(f"\n## Calibration: every output's rms_rel ratio (head / base, each at least error_floor {floor:g}) by run,"
      " and each shape's worst")
for archive in ("call1-stages-3.8.tgz", "call2-aa-3.8.tgz", "call4-blockn-3.8.tgz", "call3-blockn-3.4.tgz",
                "call4-acc-3.8.tgz", "call3-acc-3.4.tgz"):
    docs = docs_in(archive, ".json")
    base = {r["key"]: r for n, d in docs.items() if n.endswith("perf-base.json") for r in d["results"]}
    head = {r["key"]: r for n, d in docs.items() if n.endswith("perf-head.json") for r in d["results"]}
    ratios, worst, identical = [], [], 0
    for key, h in head.items():
        hv = h["numerics"].get("versus", {}).get("outputs", {})
        if hv and all(o["identical"] for o in hv.values()):
            identical += 1
            continue
        be, he = base[key]["numerics"]["reference"]["errors"], h["numerics"]["reference"]["errors"]
        mine = [max(he[o]["rms_rel"], floor) / max(be[o]["rms_rel"], floor) for o in he if o in be]
        ratios += mine
        worst.append(max(mine))
    rng = f"{min(ratios):.4f} .. {max(ratios):.4f} (median {statistics.median(ratios):.4f})" if ratios else "-"
    wrng = f"{min(worst):.4f} .. {max(worst):.4f}" if worst else "-"
    print(f"- {archive}: {identical} of {len(head)} shapes bitwise identical; "
          f"{len(ratios)} output ratios of the others: {rng}; worst per shape {wrng}")

print("\n## Golden (triton-3.4) against top of tree (triton-3.8): error against float64, pull-request subset")
d34 = next(d for n, d in docs_in("call3-pr-3.4.tgz", "perf.json").items() if "triton-3.4" in n)
d38 = next(d for n, d in docs_in("call1-pr-3.8.tgz", "perf.json").items() if "triton-3.8" in n)
c = compare(d34, d38, gate_policy(pipeline.perf), cross_toolchain=True)
r34 = {r["key"]: r for r in d34["results"]}
r38 = {r["key"]: r for r in d38["results"]}
ratios = [v.numerics.worst_ratio for v in c.shapes]
print(f"numerics {c.numerics_summary}; worst rms_rel ratio per shape (3.8 / 3.4) {min(ratios):.4f} .. {max(ratios):.4f}")
print("| shape | numerics | out rms_rel 3.4 | 3.8 | worst output 3.4 (rms_rel) | 3.8 | max_abs / tol 3.4 | 3.8 | numerics s 3.4 | 3.8 |")
print("|---|---|---|---|---|---|---|---|---|---|")
secs = {"3.4": [], "3.8": []}
for v in sorted(c.shapes, key=lambda v: v.key):
    a, b = r34[v.key]["numerics"], r38[v.key]["numerics"]
    ea, eb = a["reference"]["errors"], b["reference"]["errors"]
    wa = max(ea, key=lambda o: ea[o]["rms_rel"])
    wb = max(eb, key=lambda o: eb[o]["rms_rel"])
    ta = max(e["max_abs"] / e["tol_abs"] for e in ea.values() if e["tol_abs"])
    tb = max(e["max_abs"] / e["tol_abs"] for e in eb.values() if e["tol_abs"])
    secs["3.4"].append(a["seconds"])
    secs["3.8"].append(b["seconds"])
    print(f"| `{v.key}` | {v.numerics.class_} | {ea['out']['rms_rel']:.3e} | {eb['out']['rms_rel']:.3e} | "
          f"{wa} {ea[wa]['rms_rel']:.3e} | {wb} {eb[wb]['rms_rel']:.3e} | {ta:.3f} | {tb:.3f} | "
          f"{a['seconds']:.1f} | {b['seconds']:.1f} |")
for t, s in secs.items():
    print(f"- numerics time per shape, triton-{t}: total {sum(s):.0f} s over {len(s)} shapes, max {max(s):.1f} s")
