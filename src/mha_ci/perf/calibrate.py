"""Is the gate right for this machine? Judged from two measurements of one build (A/A).

Between two runs of the same build every shape's true delta is zero, so:
- every "regression" the gate calls is a false regression (likewise "improvement");
- a shape's threshold_pct is the smallest slowdown the gate can catch on it;
- the largest |delta| seen is the floor that would have made no false call, and the largest
  |delta| / combined noise the k that would have.
With a third measurement of the same build carrying a planted slowdown
(MHA_PERF_PLANT_SLOWDOWN, see the payload) the catching rate is measured too: the share of
planted shapes the gate calls a regression, and the delta actually realised.

An interleaved comparison (`perf measure --against` or `--interleave`) measures its planted
run's own base side beside it: pass that as `planted_base`, so the planted shapes are judged the
way that comparison judges them. `min_us` keeps only shapes whose A time is at least that many
us (the planted spin's fixed launch cost overshoots on the shortest shapes; the payload says why).
Rates are given over all shapes and per pass (fwd, bwd).

The verdict holds both rates to the bars of pipelines/perf.yaml (`calibration`): at most 1 % of
shapes falsely called regressions, at least 95 % of planted shapes caught. `mha-ci perf
calibrate` exits 1 when a bar is missed, so a calibration run can gate like a comparison.

Several A/A pairs (`calibrate_pairs`) are judged as one sample: a false-regression rate of at
most 1 % needs hundreds of judgements, more than one run of a pull-request subset holds. A shape
whose two sides record different code objects is left out of its pair and named: it is no A/A
judgement. That lets the same-code shapes of a real A/B run (a pull request's perf job) count.

The scaled plant (`scaled_pct`) is a slowdown that realises exactly what it says: each pair's B
side with every time multiplied by 1 + pct/100 (its rep means too, so its noise and interval are
B's), judged against A. It asks what the gate's statistics do with a kernel that is exactly that
much slower, under the real noise and side-to-side offsets of the measured pairs. The payload's
spin plant (`planted`) asks the other half: whether the harness sees a slowdown on the GPU at
all; its realised delta is reported beside its catch rate.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from mha_ci.perf.compare import GatePolicy, ShapeVerdict, compare, same_code
from mha_ci.perf.report import COLOURS, figure_png, pyplot
from mha_ci.perf.shapes import pass_of_key


@dataclass(frozen=True)
class Bars:
    """What a gate must achieve on a machine to be called calibrated (pipelines/perf.yaml)."""

    max_false_regression_pct: float = 1.0
    min_planted_catch_pct: float = 95.0


REALISED_BANDS = ((-100.0, 3.0), (3.0, 5.0), (5.0, 7.5), (7.5, 10.0), (10.0, 20.0), (20.0, 1e9))


@dataclass(frozen=True)
class _Judged:
    """A shape the gate judged (any status but invalid), with the numbers that judgement used."""

    key: str
    status: str
    delta_pct: float
    threshold_pct: float
    noise_a_pct: float
    noise_b_pct: float


def _judged(verdicts: tuple[ShapeVerdict, ...]) -> list[_Judged]:
    """The valid shapes, in order. compare judges a shape only when both times and noises are
    numbers, so a valid verdict lacking one is a bug there, reported as such."""
    out = []
    for v in verdicts:
        if v.status == "invalid":
            continue
        if (v.delta_pct is None or v.threshold_pct is None or v.noise_baseline_pct is None
                or v.noise_candidate_pct is None):
            raise RuntimeError(f"shape {v.key}: status {v.status} without a delta, threshold or noise")
        out.append(_Judged(v.key, v.status, v.delta_pct, v.threshold_pct, v.noise_baseline_pct,
                           v.noise_candidate_pct))
    return out


def _ceil_half(x: float) -> float:
    return math.ceil(x * 2) / 2


def at_least(doc: dict, keys_of: dict, min_us: float) -> dict:
    """`doc` with only the shapes whose time in `keys_of` (a perf document) is at least `min_us`."""
    if min_us <= 0:
        return doc
    kept = {e["key"] for e in keys_of["results"]
            if isinstance(e.get("stats"), dict) and (e["stats"].get("trimmed_mean_us") or 0) >= min_us}
    results = [e for e in doc["results"] if e["key"] in kept]
    selection = {**(doc.get("selection") or {}), "subset": "custom", "count": len(results)}
    return {**doc, "selection": selection, "results": results}


def without_other_code(a: dict, b: dict) -> tuple[dict, dict, list[str]]:
    """(a, b) without the shapes whose code objects differ between them (compare.same_code is
    False), and those shapes' keys. A shape with no code objects recorded on a side is kept
    (nothing says it differs)."""
    by_key = {e["key"]: e for e in a["results"]}
    other = sorted(e["key"] for e in b["results"] if same_code(by_key.get(e["key"]), e) is False)
    if not other:
        return a, b, []

    def without(doc: dict) -> dict:
        results = [e for e in doc["results"] if e["key"] not in other]
        return {**doc, "selection": {**(doc.get("selection") or {}), "subset": "custom", "count": len(results)},
                "results": results}
    return without(a), without(b), other


def calibrate(a: dict, b: dict, policy: GatePolicy, planted: dict | None = None, bars: Bars = Bars(),
              planted_base: dict | None = None, min_us: float = 0.0, scaled_pct: float | None = None) -> dict:
    """One A/A pair: calibrate_pairs with a single pair."""
    return calibrate_pairs([(a, b)], policy, planted=planted, bars=bars, planted_base=planted_base,
                           min_us=min_us, scaled_pct=scaled_pct)


def calibrate_pairs(pairs: list[tuple[dict, dict]], policy: GatePolicy, planted: dict | None = None,
                    bars: Bars = Bars(), planted_base: dict | None = None, min_us: float = 0.0,
                    scaled_pct: float | None = None) -> dict:
    """Every pair's A/A judgements as one sample. The spin-planted run is judged against
    `planted_base` (default: the first pair's A); the scaled plant against each pair's A."""
    if not pairs:
        return {"refused": "no A/A pair to judge"}
    other_code: list[dict] = []
    kept = []
    for n, (a, b) in enumerate(pairs, start=1):
        a, b, other = without_other_code(at_least(a, a, min_us), at_least(b, a, min_us))
        other_code += [{"pair": n, "key": key} for key in other]
        kept.append((a, b))
    pairs = kept
    valid: list[_Judged] = []
    shapes = []
    for n, (a, b) in enumerate(pairs, start=1):
        aa = compare(a, b, policy)
        if aa.refused:
            return {"refused": aa.refused if len(pairs) == 1 else f"pair {n}: {aa.refused}"}
        valid += _judged(aa.shapes)
        for v in aa.shapes:
            combined = math.hypot(v.noise_baseline_pct or 0, v.noise_candidate_pct or 0)
            shapes.append({"pair": n, "key": v.key, "noise_a_pct": v.noise_baseline_pct,
                           "noise_b_pct": v.noise_candidate_pct, "aa_delta_pct": v.delta_pct,
                           "smallest_caught_pct": v.threshold_pct, "combined_noise_pct": round(combined, 3),
                           "status": v.status, "reason": v.reason})
    deltas = [abs(v.delta_pct) for v in valid]
    ratios = [abs(v.delta_pct) / math.hypot(v.noise_a_pct, v.noise_b_pct)
              for v in valid if math.hypot(v.noise_a_pct, v.noise_b_pct) > 0]
    false_reg = [v.key for v in valid if v.status == "regression"]
    false_imp = [v.key for v in valid if v.status == "improvement"]
    thresholds = [v.threshold_pct for v in valid]
    result = {
        "schema": "mha-ci.perf-calibrate/1",
        "gate": {"floor_pct": policy.floor_pct, "k": policy.k, "invalid_noise_pct": policy.invalid_noise_pct},
        "min_us": min_us,
        "pairs": len(pairs),
        "shapes_total": len(shapes),
        "shapes_valid": len(valid),
        "left_out_other_code": other_code,
        "false_regressions": false_reg,
        "false_regression_rate": len(false_reg) / len(valid) if valid else None,
        # One-sided 95 % upper bound of the rate: how low a rate this many judgements can show.
        "false_regression_rate_upper95": _upper95(len(false_reg), len(valid)),
        "false_improvements": false_imp,
        "false_improvement_rate": len(false_imp) / len(valid) if valid else None,
        "aa_abs_delta_pct": _summary(deltas),
        "aa_delta_pct": _summary([v.delta_pct for v in valid]),
        "noise_pct": _summary([s for v in valid for s in (v.noise_a_pct, v.noise_b_pct)]),
        "smallest_caught_pct": _summary(thresholds),
        "zero_false_call_floor_pct": _ceil_half(max(deltas)) if deltas else None,
        "zero_false_call_k": round(max(ratios), 2) if ratios else None,
        "by_pass": {pass_: {"shapes_valid": len(group),
                            "false_regressions": sum(v.status == "regression" for v in group),
                            "aa_abs_delta_pct": _summary([abs(v.delta_pct) for v in group])}
                    for pass_ in ("fwd", "bwd")
                    for group in [[v for v in valid if pass_of_key(v.key) == pass_]] if group},
        "shapes": shapes,
    }
    if planted is not None:
        base = pairs[0][0] if planted_base is None else at_least(planted_base, pairs[0][0], min_us)
        result["planted"] = {**planted_catch([(base, at_least(planted, pairs[0][0], min_us))], policy),
                             "how": "spin"}
    if scaled_pct is not None:
        result["scaled"] = {**planted_catch([(a, scaled(b, scaled_pct)) for a, b in pairs], policy), "how": "scaled"}
    result["verdict"] = verdict(result, bars)
    return result


def scaled(doc: dict, pct: float) -> dict:
    """`doc` with every shape exactly `pct` % slower: each time multiplied by 1 + pct/100, and the
    shape marked planted. Relative noise and stall ratios are unchanged by construction."""
    if not pct > 0:
        raise ValueError(f"a scaled plant must slow down: {pct} %")
    factor = 1.0 + pct / 100.0
    results = []
    for e in doc["results"]:
        st = e.get("stats")
        if isinstance(st, dict):
            st = {k: (round(v * factor, 3) if k.endswith("_us") and isinstance(v, (int, float)) else v)
                  for k, v in st.items()}
            if isinstance(st.get("rep_means_us"), list):
                st["rep_means_us"] = [round(x * factor, 3) for x in st["rep_means_us"]]
        results.append({**e, "stats": st, "planted_pct": pct})
    return {**doc, "results": results}


def _upper95(events: int, trials: int) -> float | None:
    """Clopper-Pearson one-sided 95 % upper bound of a rate seen as events/trials (bisection on
    the binomial tail; standard library only). 0 of 300 gives 0.99 %: the "rule of three"."""
    if not trials:
        return None
    if events >= trials:
        return 1.0

    def tail(p: float) -> float:   # P(X <= events) for X ~ Binomial(trials, p)
        return sum(math.comb(trials, i) * p ** i * (1 - p) ** (trials - i) for i in range(events + 1))

    lo, hi = events / trials, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) > 0.05 else (lo, mid)
    return round(hi, 5)


def verdict(result: dict, bars: Bars) -> dict:
    """Each measured rate against its bar; `met` is False when any bar is missed or cannot be
    judged (no valid shape, a refused planted run, no planted shape)."""
    checks = []
    rate = result["false_regression_rate"]
    checks.append({"bar": "false_regressions", "value_pct": None if rate is None else round(100 * rate, 2),
                   "limit_pct": bars.max_false_regression_pct, "at_most": True,
                   "met": rate is not None and 100 * rate <= bars.max_false_regression_pct})
    # A rate seen on too few judgements shows nothing (0 of 35 leaves up to 8.2 %): the bar is
    # met only where the sample's 95 % upper bound is under it too (0 false calls in 300 or more).
    upper = result.get("false_regression_rate_upper95")
    checks.append({"bar": "false_regressions_shown", "value_pct": None if upper is None else round(100 * upper, 2),
                   "limit_pct": bars.max_false_regression_pct, "at_most": True,
                   "met": upper is not None and 100 * upper <= bars.max_false_regression_pct})
    for name in ("planted", "scaled"):
        planted = result.get(name)
        if planted is not None:
            catch = planted.get("catch_rate")
            checks.append({"bar": f"{name}_catch", "value_pct": None if catch is None else round(100 * catch, 2),
                           "limit_pct": bars.min_planted_catch_pct, "at_most": False,
                           "met": catch is not None and 100 * catch >= bars.min_planted_catch_pct})
    return {"checks": checks, "met": all(c["met"] for c in checks)}


def planted_catch(pairs: list[tuple[dict, dict]], policy: GatePolicy) -> dict:
    """How many planted shapes the gate calls a regression, each planted run judged against its
    base: (base, planted) per pair, counted together."""
    hits: list[tuple[int, _Judged]] = []
    clean: list[_Judged] = []
    nominal: set[float] = set()
    for n, (base, planted) in enumerate(pairs, start=1):
        comparison = compare(base, planted, policy)
        if comparison.refused:
            return {"refused": comparison.refused}
        pct_of = {e["key"]: e.get("planted_pct", 0.0) for e in planted["results"]}
        for v in _judged(comparison.shapes):
            if pct_of.get(v.key):
                hits.append((n, v))
                nominal.add(pct_of[v.key])
            else:
                clean.append(v)
    judged = [v for _, v in hits]
    caught = [v for v in judged if v.status == "regression"]
    return {
        "nominal_pct": sorted(nominal),
        "by_pass": {pass_: {"planted_shapes": len(group), "caught": sum(v.status == "regression" for v in group)}
                    for pass_ in ("fwd", "bwd")
                    for group in [[v for v in judged if pass_of_key(v.key) == pass_]] if group},
        "planted_shapes": len(judged),
        "caught": len(caught),
        "catch_rate": len(caught) / len(judged) if judged else None,
        "missed": [{"pair": n, "key": v.key, "delta_pct": round(v.delta_pct, 2),
                    "threshold_pct": round(v.threshold_pct, 2)}
                   for n, v in hits if v.status != "regression"],
        "realised_delta_pct": _summary([v.delta_pct for v in judged]),
        # The planted amount is nominal; what the gate must catch is the slowdown that happened.
        # Caught share per band of realised delta (the bar is about 5-10 % slowdowns).
        "caught_by_realised_band": [
            {"band_pct": [lo, hi], "shapes": len(band), "caught": sum(v.status == "regression" for v in band)}
            for lo, hi in REALISED_BANDS
            for band in [[v for v in judged if lo <= v.delta_pct < hi]]],
        "unplanted_false_regressions": [v.key for v in clean if v.status == "regression"],
        "shapes": [{"pair": n, "key": v.key, "delta_pct": round(v.delta_pct, 3),
                    "threshold_pct": round(v.threshold_pct, 3), "caught": v.status == "regression"}
                   for n, v in hits],
    }


def _summary(values: list[float]) -> dict | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"min": round(ordered[0], 3), "median": round(statistics.median(ordered), 3),
            "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3), "max": round(ordered[-1], 3)}


PLANT_TITLES = {"spin": "Planted slowdown (the payload's spin, on the GPU)",
                "scaled": "Scaled plant (each B side's times x (1 + p/100): realises exactly p)"}


def markdown(result: dict) -> str:
    if "refused" in result and len(result) == 1:
        return f"# Perf calibration\n\nREFUSED: {result['refused']}\n"
    g = result["gate"]
    pairs = result.get("pairs", 1)
    upper = result.get("false_regression_rate_upper95")
    lines = ["# Perf calibration (A/A)", "",
             f"Gate under test: floor {g['floor_pct']} %, k {g['k']}, invalid above {g['invalid_noise_pct']} % noise"
             + (f"; shapes of at least {result['min_us']:g} us." if result.get("min_us") else "."),
             _verdict_line(result.get("verdict")),
             f"A/A pairs: {pairs}. Valid judgements: {result['shapes_valid']} of {result['shapes_total']}."
             + _other_code_line(result.get("left_out_other_code") or []),
             f"False regressions: {len(result['false_regressions'])} "
             f"({_pct(result['false_regression_rate'])}"
             + ("" if upper is None else f"; 95 % upper bound {100 * upper:.2f} %")
             + f"); false improvements: {len(result['false_improvements'])} "
             f"({_pct(result['false_improvement_rate'])}).",
             f"|A/A delta| %: {_fmt_summary(result['aa_abs_delta_pct'])}.",
             f"Noise % (robust std of rep means): {_fmt_summary(result['noise_pct'])}.",
             f"Smallest slowdown caught %: {_fmt_summary(result['smallest_caught_pct'])}.",
             f"A floor of {result['zero_false_call_floor_pct']} % (or k = {result['zero_false_call_k']}) "
             f"would have made no false call on {'this pair' if pairs == 1 else 'these pairs'}.", ""]
    if result.get("false_regressions"):
        lines += ["False regressions:", ""] + [f"- `{k}`" for k in result["false_regressions"]] + [""]
    for name in ("planted", "scaled"):
        planted = result.get(name)
        if not planted:
            continue
        title = PLANT_TITLES[planted.get("how", "spin")]
        if "refused" in planted:
            lines += [f"{title}: REFUSED: {planted['refused']}", ""]
            continue
        lines += [f"{title} {', '.join(f'{p:g}' for p in planted['nominal_pct'])} %: caught {planted['caught']} of "
                  f"{planted['planted_shapes']} ({_pct(planted['catch_rate'])}); realised delta %: "
                  f"{_fmt_summary(planted['realised_delta_pct'])}; false regressions on unplanted shapes: "
                  f"{len(planted['unplanted_false_regressions'])}.", ""]
        if planted.get("by_pass"):
            lines += ["By pass: " + ", ".join(f"{k} {v['caught']} of {v['planted_shapes']}"
                                              for k, v in planted["by_pass"].items()) + ".", ""]
        lines += ["| realised slowdown % | shapes | caught |", "|---|---|---|"]
        lines += [f"| {_band(b['band_pct'])} | {b['shapes']} | {b['caught']} |"
                  for b in planted.get("caught_by_realised_band", []) if b["shapes"]] + [""]
        if planted["missed"]:
            lines += ["Missed:", ""] + [f"- `{m['key']}`{'' if pairs == 1 else ' (pair ' + str(m.get('pair')) + ')'}: "
                                        f"{m['delta_pct']:+.2f} % <= {m['threshold_pct']:.2f} %"
                                        for m in planted["missed"]] + [""]
    pair_col = pairs > 1
    lines += [("| pair " if pair_col else "") + "| shape | noise A % | noise B % | A/A delta % | smallest caught % | status |",
              ("|---" if pair_col else "") + "|---|---|---|---|---|---|"]
    for s in result["shapes"]:
        lines.append((f"| {s.get('pair', 1)} " if pair_col else "")
                     + f"| `{s['key']}` | {_num(s['noise_a_pct'])} | {_num(s['noise_b_pct'])} | "
                     f"{_num(s['aa_delta_pct'])} | {_num(s['smallest_caught_pct'])} | {s['status']} |")
    return "\n".join(lines) + "\n"


def _other_code_line(other: list[dict]) -> str:
    if not other:
        return ""
    return (f" Left out, other code on the two sides (no A/A judgement): {len(other)}: "
            + ", ".join(f"`{o['key']}` (pair {o['pair']})" for o in other) + ".")


def _verdict_line(v: dict | None) -> str:
    if not v:
        return ""
    names = {"false_regressions": "false regressions", "planted_catch": "planted shapes caught",
             "false_regressions_shown": "its 95 % upper bound",
             "scaled_catch": "scaled-plant shapes caught"}
    parts = [f"{names[c['bar']]} {'-' if c['value_pct'] is None else c['value_pct']} % "
             f"{'<=' if c['at_most'] else '>='} {c['limit_pct']:g} %: {'met' if c['met'] else 'MISSED'}"
             for c in v["checks"]]
    return f"**Calibrated: {'yes' if v['met'] else 'NO'}** ({'; '.join(parts)})."


def _band(band) -> str:
    lo, hi = band
    return f"< {hi:g}" if lo <= -100 else (f">= {lo:g}" if hi >= 1e9 else f"{lo:g} to {hi:g}")


def _pct(rate) -> str:
    return "-" if rate is None else f"{100 * rate:.1f} %"


def _num(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _fmt_summary(s) -> str:
    return "-" if not s else f"min {s['min']}, median {s['median']}, p90 {s['p90']}, max {s['max']}"


def plot_png(result: dict) -> bytes:
    """What the numbers say, per shape. Top: the A/A delta of every valid shape (shapes sorted by
    the smallest slowdown the gate catches on them, drawn as the dashed band); a bar outside the
    band is a false call. Bottom, with a planted run: the slowdown each planted shape really got,
    green where the gate caught it, red where it did not, against the same kind of band."""
    plt = pyplot()
    plants = [result[n] for n in ("planted", "scaled") if result.get(n) and "refused" not in result[n]]
    rows = 1 + len(plants)
    fig, axes = plt.subplots(rows, 1, figsize=(12.0, 4.2 * rows), dpi=100, squeeze=False)
    aa = sorted((s for s in result["shapes"] if s["status"] != "invalid"), key=lambda s: s["smallest_caught_pct"])
    ax = axes[0][0]
    xs = range(len(aa))
    ax.bar(xs, [s["aa_delta_pct"] for s in aa], width=0.85,
           color=[COLOURS["regression"] if s["status"] != "ok" else COLOURS["ok"] for s in aa])
    ax.step(xs, [s["smallest_caught_pct"] for s in aa], where="mid", color="black", linestyle="--", linewidth=0.7)
    ax.step(xs, [-s["smallest_caught_pct"] for s in aa], where="mid", color="black", linestyle="--", linewidth=0.7)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks([])
    ax.set_xlabel(f"judgement ({len(aa)} valid, {result.get('pairs', 1)} pair(s)), sorted by the smallest slowdown caught")
    ax.set_ylabel("A/A delta %")
    ax.set_title(f"A/A: {len(result['false_regressions'])} false regressions, "
                 f"{len(result['false_improvements'])} false improvements; dashed: +/- threshold", fontsize=10)
    for row, planted in enumerate(plants, start=1):
        shapes = sorted(planted["shapes"], key=lambda s: s["delta_pct"])
        ax = axes[row][0]
        xs = range(len(shapes))
        ax.bar(xs, [s["delta_pct"] for s in shapes], width=0.85,
               color=[COLOURS["improvement"] if s["caught"] else COLOURS["regression"] for s in shapes])
        ax.step(xs, [s["threshold_pct"] for s in shapes], where="mid", color="black", linestyle="--", linewidth=0.7)
        for pct in planted["nominal_pct"]:
            ax.axhline(pct, color="#1d3557", linewidth=0.8, linestyle=":")
        ax.set_xticks([])
        ax.set_xlabel(f"planted shape ({len(shapes)}), sorted by the slowdown realised")
        ax.set_ylabel("realised slowdown %")
        rate = planted["catch_rate"]
        how = "scaled" if planted.get("how") == "scaled" else "spin"
        ax.set_title(f"{how} plant {', '.join(f'{p:g}' for p in planted['nominal_pct'])} % (dotted): caught "
                     f"{planted['caught']} of {planted['planted_shapes']}"
                     f"{'' if rate is None else f' ({100 * rate:.1f} %)'}; green caught, red missed; "
                     "dashed: threshold", fontsize=10)
    verdict_ = result.get("verdict")
    if verdict_:
        fig.suptitle(f"calibrated: {'yes' if verdict_['met'] else 'NO'}", fontsize=11)
    fig.tight_layout()
    return figure_png(fig)
