"""Numerical transparency of a kernel change: what one shape's outputs say, base against head.

The perf payload records per shape (a result record's `numerics`) a digest of every output
(out, lse, and for the backward dq, dk, dv, dsink), inputs seeded by the shape key, and each
output's error against a float64 reference of a reduced problem: `max_abs`, `rms_rel`
(||got - ref|| / ||ref||) and the flash-attn tolerance `tol_abs` (twice the error of the same
math done in the input dtype, at least a dtype floor). The head document of `perf measure
--against` also carries `versus`: the head's outputs compared bit by bit with the base's.

`classify` gives each shape one class, checked in this order:

  unmeasured        the head has no numerics, or they carry an `error`, or they are malformed.
  wrong             an output of the head is beyond tolerance (`max_abs > tol_abs`) or has
                    non-finite values where the reference has none. Needs only the head's record,
                    so it comes before anything the base could say: a result bitwise identical to
                    a base that is as wrong is still wrong (the detail says so).
  unmeasured        the base has no numerics or an `error`.
  identical         every output bitwise equal: from `versus` when it names the base judged,
                    else from equal sha256 of every output. Digests only mean something for the
                    same inputs: a different seed or another set of outputs cannot be identical.
  nondeterministic  both sides launched the same code objects (`same_code`) on the same inputs
                    and the bits differ. Red: identical code on identical inputs must give
                    identical bits, or every digest comparison downstream is noise. Outputs a
                    side declares `unordered_outputs` (added up in no fixed order by design, as
                    the single-pass backward's dQ: mha.launch.UNORDERED_OUTPUTS) and the gate
                    allows (perf.yaml numerics.may_be_unordered) are exempt: when only they
                    differ, the shape goes on to the error ratios below.
  unmeasured        neither identical nor nondeterministic, and no output has reference errors
                    on both sides to set against each other.
  less-accurate     not identical, and for some output head rms_rel / base rms_rel exceeds
                    perf.yaml's `numerics.less_accurate_factor`. Each side's rms_rel is taken at
                    least `numerics.error_floor`, so an exact output (0 error) neither divides by
                    zero nor turns a rounding-level change into an infinite ratio.
  reordered         not identical, every ratio within the factor: the sums ran in another order,
                    as a retuned tile or split does. "more accurate" when every ratio is below
                    1 / factor.

A change that alters bits is not wrong by itself (a new tile size reorders the sums); the ratio
of errors against one float64 reference is what tells a reordering from a loss of precision,
and the factor is calibrated on the reorderings of known-good configs (pipelines/perf.yaml).
Standard library only: the orchestrating side has neither torch nor numpy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

IDENTICAL = "identical"
WRONG = "wrong"
NONDETERMINISTIC = "nondeterministic"
LESS_ACCURATE = "less-accurate"
REORDERED = "reordered"
UNMEASURED = "unmeasured"
# The order the reports list and count them: red first.
CLASSES = (WRONG, NONDETERMINISTIC, LESS_ACCURATE, UNMEASURED, REORDERED, IDENTICAL)


@dataclass(frozen=True)
class NumericsVerdict:
    class_: str                         # one of CLASSES
    worst_output: str | None = None     # the output that decided the class (wrong: the one furthest beyond tolerance)
    # less-accurate, reordered, identical, nondeterministic: the largest head/base rms_rel ratio
    # (of worst_output); wrong: that output's max_abs / tol_abs (None for a non-finite mismatch).
    worst_ratio: float | None = None
    max_ulp: int | None = None          # largest ulp distance over the outputs, where `versus` says it
    reason: str = ""
    # worst_output's rms_rel against the float64 reference on each side, where both sides have it:
    # the error itself, so that a table of two toolchains shows each one's accuracy
    base_error: float | None = None
    head_error: float | None = None

    def to_dict(self) -> dict:
        return {"class": self.class_, "worst_output": self.worst_output,
                "worst_ratio": None if self.worst_ratio is None else round(self.worst_ratio, 4),
                "max_ulp": self.max_ulp, "reason": self.reason,
                "base_rms_rel": self.base_error, "head_rms_rel": self.head_error}


def has_numerics(record: dict | None) -> bool:
    """Whether a result record was measured with numerics at all (an `error` counts: it was tried)."""
    return isinstance(record, dict) and record.get("numerics") is not None


def classify(base: dict | None, head: dict | None, same_code: bool | None, *, factor: float, floor: float,
             base_commit: str | None = None, may_be_unordered: frozenset[str] = frozenset()) -> NumericsVerdict:
    """The class of one shape (module docstring) from its base and head result records (either
    may be None: not measured). `base_commit` is the base document's commit: the head's `versus`
    is used only when it was taken against that commit. `may_be_unordered` (perf.yaml
    numerics.may_be_unordered) bounds which declared unordered outputs are honoured. The verdict
    carries each side's rms_rel of its worst output."""
    head_n, why = _numerics(head, "head")
    if head_n is None:
        return NumericsVerdict(UNMEASURED, reason=why)
    head_err, why = _errors(head_n, "head")
    if head_err is None:
        return NumericsVerdict(UNMEASURED, reason=why)
    base_n, base_why = _numerics(base, "base")
    base_err, errors_why = _errors(base_n, "base") if base_n is not None else (None, base_why)
    verdict = _classify(base_n, head_n, base_err, head_err, same_code, factor=factor, floor=floor,
                        base_commit=base_commit, base_why=base_why, errors_why=errors_why,
                        may_be_unordered=may_be_unordered)
    name = verdict.worst_output
    if name is None:
        return verdict
    return replace(verdict, base_error=base_err[name]["rms_rel"] if base_err and name in base_err else None,
                   head_error=head_err[name]["rms_rel"] if name in head_err else None)


def _classify(base_n: dict | None, head_n: dict, base_err: dict | None, head_err: dict, same_code: bool | None, *,
              factor: float, floor: float, base_commit: str | None, base_why: str, errors_why: str,
              may_be_unordered: frozenset[str]) -> NumericsVerdict:
    """classify's rules on the records' numerics and errors, read once by classify."""
    identity, differing, max_ulp, identity_why = (_identity(base_n, head_n, base_commit) if base_n is not None
                                                  else (None, [], None, base_why))
    beyond = _beyond_tolerance(head_err)
    if beyond:
        name, ratio, detail = beyond
        also = []
        if identity:
            also.append("bitwise identical to the base, which is as wrong")
        elif base_err is not None and _beyond_tolerance(base_err):
            also.append("the base is beyond tolerance too")
        return NumericsVerdict(WRONG, name, ratio, max_ulp, "; ".join([detail, *also]))
    if base_n is None:
        return NumericsVerdict(UNMEASURED, max_ulp=max_ulp, reason=base_why)
    unordered: frozenset[str] = frozenset()
    for side, n in (("base", base_n), ("head", head_n)):
        declared = declared_unordered(n)
        if declared is None:
            return NumericsVerdict(UNMEASURED, max_ulp=max_ulp, reason=f"{side} unordered_outputs is not a list of "
                                   f"output names: {n.get('unordered_outputs')!r:.60}")
        unordered |= declared
    ratios = {} if base_err is None else {
        name: max(head_err[name]["rms_rel"], floor) / max(base_err[name]["rms_rel"], floor)
        for name in sorted(set(head_err) & set(base_err))}
    worst = max(ratios, key=lambda name: (ratios[name], name)) if ratios else None
    ratio = ratios[worst] if worst is not None else None
    if identity:
        return NumericsVerdict(IDENTICAL, worst, ratio, max_ulp, identity_why)
    # The numerics' own code objects where both sides recorded them: a stored accuracy record
    # belongs to the code it ran, which the timing baseline it is folded into may not share.
    codes = [n.get("code_objects") for n in (base_n, head_n)]
    if all(isinstance(c, dict) and c for c in codes):
        same_code = codes[0] == codes[1]
    # Only outputs added up in no fixed order differ, declared so and allowed by the gate: same
    # code may give other bits there, so their errors, not their bits, decide.
    by_design = identity is False and set(differing) <= unordered & may_be_unordered
    if same_code and identity is False and not by_design:
        refused = sorted(set(differing) & (unordered - may_be_unordered))
        not_allowed = (f"; declared unordered but not in perf.yaml numerics.may_be_unordered: {', '.join(refused)}"
                       if refused else "")
        return NumericsVerdict(NONDETERMINISTIC, worst, ratio, max_ulp,
                               f"same code objects on the same inputs, different bits ({identity_why}){not_allowed}")
    if worst is None or ratio is None:
        return NumericsVerdict(UNMEASURED, max_ulp=max_ulp,
                               reason=errors_why or "no output has a reference error on both sides")
    if by_design:
        undecided = f"; {', '.join(differing)} added up in no fixed order (unordered_outputs): {identity_why}"
    else:
        undecided = f"; {identity_why}" if identity is None else ""
    if ratio > factor:
        return NumericsVerdict(LESS_ACCURATE, worst, ratio, max_ulp,
                               f"{worst} rms_rel x{ratio:.2f} of the base's (> x{factor:g}){undecided}")
    if all(r < 1.0 / factor for r in ratios.values()):
        detail = f"more accurate: every output's rms_rel below 1/{factor:g} of the base's (worst {worst} x{ratio:.2f})"
    else:
        detail = f"bits differ, errors within x{factor:g} of the base's (worst {worst} x{ratio:.2f})"
    return NumericsVerdict(REORDERED, worst, ratio, max_ulp, detail + undecided)


def _numerics(record: dict | None, side: str) -> tuple[dict | None, str]:
    """(the record's numerics when usable, else None and why)."""
    if record is None:
        return None, f"{side} not measured"
    numerics = record.get("numerics")
    if numerics is None:
        return None, f"{side} measured without numerics"
    if not isinstance(numerics, dict):
        return None, f"{side} numerics is not an object"
    if numerics.get("error") is not None:
        return None, f"{side} numerics failed: {numerics['error']}"
    return numerics, ""


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _errors(numerics: dict, side: str) -> tuple[dict[str, dict] | None, str]:
    """Each output's reference errors as numbers ({name: {max_abs, rms_rel, tol_abs, nonfinite}}),
    or None and why when the record does not hold them. max_abs may be NaN or inf (that is a
    wrong result, not a malformed record); rms_rel and tol_abs must be finite and not negative."""
    reference = numerics.get("reference")
    errors = reference.get("errors") if isinstance(reference, dict) else None
    if not isinstance(errors, dict) or not errors:
        return None, f"{side} numerics hold no reference errors"
    out = {}
    for name, e in errors.items():
        if not isinstance(e, dict):
            return None, f"{side} {name} errors are not an object"
        max_abs, rms_rel, tol_abs = (_number(e.get(k)) for k in ("max_abs", "rms_rel", "tol_abs"))
        nonfinite = e.get("nonfinite_mismatch")
        if max_abs is None or not isinstance(nonfinite, bool):
            return None, f"{side} {name} errors lack max_abs or nonfinite_mismatch"
        for label, value in (("rms_rel", rms_rel), ("tol_abs", tol_abs)):
            if value is None or not math.isfinite(value) or value < 0:
                return None, f"{side} {name} {label} is not a finite non-negative number: {e.get(label)!r:.40}"
        out[name] = {"max_abs": max_abs, "rms_rel": rms_rel, "tol_abs": tol_abs, "nonfinite": nonfinite}
    return out, ""


def _beyond_tolerance(errors: dict[str, dict]) -> tuple[str, float | None, str] | None:
    """(output, max_abs / tol_abs, detail) of the output furthest beyond tolerance, or None."""
    worst: tuple[float, str, float | None, str] | None = None
    for name in sorted(errors):
        e = errors[name]
        if e["nonfinite"]:
            rank, ratio, detail = math.inf, None, f"{name} has non-finite values where the reference has none"
        elif not math.isfinite(e["max_abs"]):
            rank, ratio, detail = math.inf, None, f"{name} max_abs is {e['max_abs']}"
        elif e["max_abs"] > e["tol_abs"]:
            ratio = e["max_abs"] / e["tol_abs"] if e["tol_abs"] > 0 else None
            rank = math.inf if ratio is None else ratio
            detail = f"{name} max_abs {e['max_abs']:.3g} > tol_abs {e['tol_abs']:.3g}"
        else:
            continue
        if worst is None or rank > worst[0]:
            worst = (rank, name, ratio, detail)
    return None if worst is None else worst[1:]


def _identity(base: dict, head: dict, base_commit: str | None) -> tuple[bool | None, list[str], int | None, str]:
    """(whether every output is bitwise equal - None when the records cannot say -, the outputs
    that differ, the largest ulp distance where known, how that was read)."""
    versus = head.get("versus")
    head_outputs = _outputs(head)
    if (isinstance(versus, dict) and versus.get("side") == "base" and base_commit
            and versus.get("commit") == base_commit and isinstance(versus.get("outputs"), dict)):
        compared = versus["outputs"]
        if head_outputs and set(compared) >= set(head_outputs) and all(isinstance(c, dict) for c in compared.values()):
            ulps = [c["max_ulp"] for c in compared.values() if _whole(c.get("max_ulp"))]
            max_ulp = max(ulps) if ulps else None
            differing = sorted(name for name, c in compared.items() if c.get("identical") is not True)
            if not differing:
                return True, [], max_ulp, "every output bitwise equal (compared against the base)"
            return False, differing, max_ulp, "differ: " + ", ".join(differing)
    if base.get("seed") != head.get("seed"):
        return None, [], None, f"seeds differ ({base.get('seed')!r} and {head.get('seed')!r}): identity not decidable"
    base_outputs = _outputs(base)
    if not head_outputs or set(base_outputs) != set(head_outputs):
        return None, [], None, "the two sides digest different outputs: identity not decidable"
    digests = {name: (_sha(base_outputs[name]), _sha(head_outputs[name])) for name in head_outputs}
    if any(b is None or h is None for b, h in digests.values()):
        return None, [], None, "an output lacks its sha256: identity not decidable"
    differing = sorted(name for name, (b, h) in digests.items() if b != h)
    if not differing:
        return True, [], None, "every output's sha256 equal"
    return False, differing, None, "sha256 differ: " + ", ".join(differing)


def declared_unordered(numerics: dict) -> frozenset[str] | None:
    """The outputs a numerics record declares added up in no fixed order (`unordered_outputs`,
    written by the perf payload from mha.launch.unordered_outputs; absent: none), or None when
    the declaration is malformed."""
    names = numerics.get("unordered_outputs", [])
    if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
        return None
    return frozenset(names)


def _outputs(numerics: dict) -> dict:
    outputs = numerics.get("outputs")
    return outputs if isinstance(outputs, dict) else {}


def _sha(output: object) -> str | None:
    digest = output.get("sha256") if isinstance(output, dict) else None
    return digest if isinstance(digest, str) and digest else None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
