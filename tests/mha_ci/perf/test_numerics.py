"""The numerics class of a shape (mha_ci.perf.numerics) and what the gate and the reports make of
it (mha_ci.perf.compare, mha_ci.perf.report, `mha-ci perf compare --accept-less-accurate`)."""
import json
import math

import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode
from mha_ci.perf import numerics as n
from mha_ci.perf import report
from mha_ci.perf.compare import compare
from mha_ci.perf.numerics import NumericsVerdict, classify

from perf_builders import doc, entry, gate, numerics, versus, write  # noqa: E402

FACTOR, FLOOR = 1.25, 1e-6
BASE_SHA = "b" * 40
KEYS = ["dense_b1_hq8_hk8_sq1024_sk1024_dqk64_dv64_c1", "dense_b2_hq8_hk8_sq1024_sk1024_dqk64_dv64_c1",
        "dense_b4_hq8_hk8_sq1024_sk1024_dqk64_dv64_c1"]


def rec(num: dict | None, code: str | None = None) -> dict:
    """A result record holding only what the classifier reads."""
    out: dict = {} if num is None else {"numerics": num}
    if code is not None:
        out["code_objects"] = {"attn_fwd": code}
    return out


def judge(base, head, same_code=False, base_commit=BASE_SHA, may_be_unordered=frozenset({"dq"})) -> NumericsVerdict:
    return classify(base, head, same_code, factor=FACTOR, floor=FLOOR, base_commit=base_commit,
                    may_be_unordered=may_be_unordered)


# the classifier ---------------------------------------------------------------------------

def test_identical_from_equal_sha256_of_every_output():
    v = judge(rec(numerics()), rec(numerics()))
    assert v.class_ == n.IDENTICAL and "sha256" in v.reason
    assert v.worst_ratio == pytest.approx(1.0) and v.max_ulp is None


def test_identical_from_versus_when_it_names_the_base_judged():
    # versus compares the bits directly: it decides even where the digests were taken apart
    head = numerics(sha="other", versus=versus(BASE_SHA))
    v = judge(rec(numerics()), rec(head))
    assert v.class_ == n.IDENTICAL and "compared against the base" in v.reason and v.max_ulp == 0


def test_versus_against_another_commit_is_ignored_for_the_sha256():
    head = numerics(versus=versus("c" * 40, differing=("out",)))
    assert judge(rec(numerics()), rec(head)).class_ == n.IDENTICAL
    assert judge(rec(numerics()), rec(head), base_commit=None).class_ == n.IDENTICAL


def test_versus_reports_the_largest_ulp_distance():
    head = numerics(sha={"out": "x"}, versus=versus(BASE_SHA, differing=("out",), max_ulp=12))
    v = judge(rec(numerics()), rec(head))
    assert v.class_ == n.REORDERED and v.max_ulp == 12


def test_wrong_beyond_tolerance_names_the_worst_output():
    head = numerics(sha="x", max_abs={"out": 0.03, "lse": 0.05}, tol=0.01)
    v = judge(rec(numerics()), rec(head))
    assert v.class_ == n.WRONG and v.worst_output == "lse" and v.worst_ratio == pytest.approx(5.0)
    assert "lse max_abs 0.05 > tol_abs 0.01" in v.reason


def test_wrong_is_checked_before_identical_and_says_the_base_is_as_wrong():
    wrong = numerics(max_abs={"out": 0.5})
    v = judge(rec(wrong), rec(wrong))
    assert v.class_ == n.WRONG and "bitwise identical to the base, which is as wrong" in v.reason


def test_wrong_on_a_nonfinite_mismatch_or_a_max_abs_that_is_not_finite():
    v = judge(rec(numerics()), rec(numerics(sha="x", nonfinite={"lse": True})))
    assert v.class_ == n.WRONG and v.worst_output == "lse" and v.worst_ratio is None
    assert "non-finite" in v.reason
    assert judge(rec(numerics()), rec(numerics(sha="x", max_abs={"out": math.nan}))).class_ == n.WRONG


def test_wrong_needs_only_the_head():
    v = judge(rec(None), rec(numerics(max_abs={"out": 1.0})))
    assert v.class_ == n.WRONG


def test_same_code_with_other_bits_is_nondeterministic():
    assert judge(rec(numerics()), rec(numerics()), same_code=True).class_ == n.IDENTICAL   # the control
    v = judge(rec(numerics()), rec(numerics(sha={"lse": "x"})), same_code=True)
    assert v.class_ == n.NONDETERMINISTIC and "lse" in v.reason


def unordered(num: dict, names=("dq",)) -> dict:
    return {**num, "unordered_outputs": list(names)}


BWD = ("out", "lse", "dq", "dk", "dv")


def test_an_output_declared_unordered_may_differ_on_the_same_code():
    base = unordered(numerics(names=BWD))
    head = unordered(numerics(names=BWD, sha={"dq": "x"}))
    v = judge(rec(base), rec(head), same_code=True)
    assert v.class_ == n.REORDERED and "dq added up in no fixed order (unordered_outputs)" in v.reason
    # declared by either side is enough: the base may be the two-kernel path
    assert judge(rec(numerics(names=BWD)), rec(head), same_code=True).class_ == n.REORDERED
    # its errors still judge it
    worse = unordered(numerics(names=BWD, sha={"dq": "x"}, rms={"dq": 2e-3}))
    assert judge(rec(base), rec(worse), same_code=True).class_ == n.LESS_ACCURATE
    assert judge(rec(base), rec(unordered(numerics(names=BWD, sha={"dq": "x"}, max_abs={"dq": 1.0}))),
                 same_code=True).class_ == n.WRONG


def test_an_ordered_output_that_differs_on_the_same_code_is_still_nondeterministic():
    head = unordered(numerics(names=BWD, sha={"dq": "x", "dk": "y"}))
    v = judge(rec(unordered(numerics(names=BWD))), rec(head), same_code=True)
    assert v.class_ == n.NONDETERMINISTIC and "dk" in v.reason
    # the control: undeclared, a differing dq on the same code is nondeterministic
    v = judge(rec(numerics(names=BWD)), rec(numerics(names=BWD, sha={"dq": "x"})), same_code=True)
    assert v.class_ == n.NONDETERMINISTIC


def test_only_the_gates_allowance_is_honoured_not_the_declaration_alone():
    base = unordered(numerics(names=BWD), names=("dq", "dk"))
    head = unordered(numerics(names=BWD, sha={"dk": "x"}), names=("dq", "dk"))
    v = judge(rec(base), rec(head), same_code=True)              # the gate allows dq only
    assert v.class_ == n.NONDETERMINISTIC and "not in perf.yaml numerics.may_be_unordered: dk" in v.reason
    dq_only = unordered(numerics(names=BWD, sha={"dq": "x"}))
    assert judge(rec(base), rec(dq_only), same_code=True, may_be_unordered=frozenset()).class_ == n.NONDETERMINISTIC
    assert judge(rec(base), rec(dq_only), same_code=True).class_ == n.REORDERED


def test_the_pipelines_gate_allows_the_single_pass_dq_only():
    assert gate().may_be_unordered == ("dq",)


def test_a_malformed_unordered_declaration_is_unmeasured_but_wrong_comes_first():
    for bad in ("dq", [""], [1], None):
        head = {**numerics(names=BWD, sha={"dq": "x"}), "unordered_outputs": bad}
        v = judge(rec(numerics(names=BWD)), rec(head), same_code=True)
        assert v.class_ == n.UNMEASURED and "unordered_outputs" in v.reason
    head = {**numerics(names=BWD, max_abs={"dq": 1.0}), "unordered_outputs": "dq"}
    assert judge(rec(numerics(names=BWD)), rec(head)).class_ == n.WRONG


def test_same_code_on_other_seeds_is_not_called_nondeterministic():
    v = judge(rec(numerics(seed=1)), rec(numerics(seed=2, sha="x")), same_code=True)
    assert v.class_ == n.REORDERED and "identity not decidable" in v.reason


def test_less_accurate_names_the_worst_output_and_its_ratio():
    head = numerics(sha="x", rms={"out": 1.1e-3, "lse": 2e-3})
    v = judge(rec(numerics()), rec(head))
    assert v.class_ == n.LESS_ACCURATE and v.worst_output == "lse" and v.worst_ratio == pytest.approx(2.0)
    assert "x2.00" in v.reason


def test_reordered_within_the_factor_and_more_accurate_below_its_inverse():
    v = judge(rec(numerics()), rec(numerics(sha="x", rms=1.2e-3)))
    assert v.class_ == n.REORDERED and "more accurate" not in v.reason
    v = judge(rec(numerics()), rec(numerics(sha="x", rms=5e-4)))
    assert v.class_ == n.REORDERED and v.reason.startswith("more accurate")
    assert v.worst_ratio == pytest.approx(0.5)


@pytest.mark.parametrize("base_rms, head_rms, expected", [
    (0.0, 0.0, n.REORDERED),            # both exact: ratio 1, no division by zero
    (0.0, 5e-7, n.REORDERED),           # below the floor on both sides
    (0.0, 1e-5, n.LESS_ACCURATE),       # exact before, 10 x the floor now
    (1e-3, 0.0, n.REORDERED),           # exact now: more accurate
])
def test_zero_errors_are_taken_at_the_floor(base_rms, head_rms, expected):
    v = judge(rec(numerics(rms=base_rms)), rec(numerics(sha="x", rms=head_rms)))
    assert v.class_ == expected and math.isfinite(v.worst_ratio)


def test_an_output_on_one_side_only_makes_identity_undecidable_and_is_left_out_of_the_ratio():
    base = numerics(names=("out", "lse"))
    head = numerics(names=("out", "lse", "dsink"), rms={"dsink": 1.0})
    v = judge(rec(base), rec(head), same_code=True)
    assert v.class_ == n.REORDERED and "different outputs" in v.reason and v.worst_ratio == pytest.approx(1.0)


@pytest.mark.parametrize("base, head, phrase", [
    (rec(None), rec(numerics()), "base measured without numerics"),
    (rec(numerics()), rec(None), "head measured without numerics"),
    (None, rec(numerics()), "base not measured"),
    (rec(numerics(error="out of memory")), rec(numerics()), "base numerics failed: out of memory"),
    (rec(numerics()), rec(numerics(error="no float64 on this device")), "head numerics failed"),
    (rec(numerics()), rec(numerics(rms={"out": "0.1"})), "rms_rel is not a finite non-negative number"),
    (rec(numerics()), rec({"seed": 7, "outputs": {}}), "no reference errors"),
])
def test_unmeasured_says_why(base, head, phrase):
    v = judge(base, head)
    assert v.class_ == n.UNMEASURED and phrase in v.reason


def test_a_base_without_errors_is_unmeasured_unless_identical():
    bare = numerics()
    bare["reference"] = {"errors": {}}
    assert judge(rec(bare), rec(numerics())).class_ == n.IDENTICAL
    assert judge(rec(bare), rec(numerics(sha="x"))).class_ == n.UNMEASURED


def test_to_dict():
    v = judge(rec(numerics()), rec(numerics(sha="x", rms={"lse": 2.123456e-3})))
    assert v.to_dict() == {"class": "less-accurate", "worst_output": "lse", "worst_ratio": 2.1235, "max_ulp": None,
                           "reason": v.reason, "base_rms_rel": 1e-3, "head_rms_rel": 2.123456e-3}
    json.dumps(v.to_dict(), allow_nan=False)


# the gate ---------------------------------------------------------------------------------

def measured(key: str, num: dict | None = None, code: str | None = None, us: float = 100.0) -> dict:
    out = entry(key, us)
    if num is not None:
        out["numerics"] = num
    if code is not None:
        out["code_objects"] = {"attn_fwd": code}
    return out


def pair(heads: list[dict | None], bases: list[dict | None] | None = None, codes=(None, None), **kwargs):
    """A comparison of len(heads) shapes, base numerics `bases` (default: numerics())."""
    bases = bases if bases is not None else [numerics()] * len(heads)
    base = doc([measured(k, b, codes[0]) for k, b in zip(KEYS, bases)], commit=BASE_SHA)
    cand = doc([measured(k, h, codes[1]) for k, h in zip(KEYS, heads)], commit="h" * 40)
    return compare(base, cand, kwargs.pop("policy", gate()), **kwargs)


def test_less_accurate_fails_the_gate():
    c = pair([numerics(sha="x", rms={"out": 5e-3}), numerics()])
    assert c.gate_failed and c.summary["ok"] == 2
    assert c.failures == [f"1 shape(s) less accurate than the base (rms_rel beyond x{gate().less_accurate_factor:g}; "
                          f"--accept-less-accurate GLOB accepts): {KEYS[0]} ({c.shapes[0].numerics.reason})"]


def test_an_accepted_less_accurate_shape_passes_and_is_listed_as_accepted():
    c = pair([numerics(sha="x", rms={"out": 5e-3}), numerics()], accept_less_accurate=["dense_b1_*"])
    assert not c.gate_failed and c.shapes[0].numerics_accepted
    assert c.numerics_summary["less-accurate"] == 1 and c.numerics_summary["accepted"] == 1
    text, md = report.text(c), report.markdown(c)
    assert f"ACCEPTED less accurate: {KEYS[0]}" in text and f"ACCEPTED less accurate: {KEYS[0]}" in md
    assert "less-accurate, accepted (out x5.00; rms_rel 1.00e-03 -> 5.00e-03)" in text
    assert "1 less-accurate (1 accepted)" in report.numerics_line(c)
    assert c.to_dict()["accept_less_accurate"] == ["dense_b1_*"]


def test_a_glob_that_matches_another_shape_accepts_nothing():
    c = pair([numerics(sha="x", rms={"out": 5e-3}), numerics()], accept_less_accurate=[KEYS[1]])
    assert c.gate_failed and not c.shapes[0].numerics_accepted


def test_same_code_but_other_bits_fails_the_gate():
    c = pair([numerics(sha={"out": "x"}), numerics()], codes=("k1", "k1"))
    assert c.shapes[0].same_code and c.shapes[0].numerics.class_ == n.NONDETERMINISTIC
    assert any(f.startswith(f"nondeterministic: {KEYS[0]}: same code objects") for f in c.failures)


def test_same_code_with_other_bits_only_in_an_unordered_output_passes_the_gate():
    declared = {"unordered_outputs": ["out"]}
    c = pair([numerics(sha={"out": "x"}) | declared, numerics()], bases=[numerics() | declared, numerics()],
             codes=("k1", "k1"), policy=gate(may_be_unordered=("out",)))
    assert c.shapes[0].same_code and c.shapes[0].numerics.class_ == n.REORDERED
    assert not c.gate_failed and not c.failures


def test_a_wrong_shape_fails_the_gate_whatever_its_speed():
    c = pair([numerics(max_abs={"out": 1.0}), numerics()])
    assert c.summary["ok"] == 2 and any(f.startswith(f"wrong result: {KEYS[0]}") for f in c.failures)


def test_numerics_are_required_when_the_candidate_has_any():
    c = pair([numerics(), None])
    assert c.numerics_required and c.shapes[1].numerics.class_ == n.UNMEASURED
    assert c.failures == [f"numerics not measured for 1 shape(s): {KEYS[1]} (head measured without numerics)"]


def test_a_policy_that_requires_numerics_fails_documents_without_them():
    c = pair([None, None], bases=[None, None], policy=gate(require_numerics=True))
    assert [v.numerics.class_ for v in c.shapes] == [n.UNMEASURED, n.UNMEASURED]
    assert c.failures[-1].startswith("numerics not measured for 2 shape(s)")


def test_a_baseline_without_numerics_fails_a_candidate_that_has_them():
    c = pair([numerics(), numerics()], bases=[None, None])
    assert c.failures[0].startswith("numerics not measured for 2 shape(s)")


def test_an_invalid_shape_is_not_counted_unmeasured_twice():
    base = doc([measured(KEYS[0], numerics()), measured(KEYS[1], numerics())], commit=BASE_SHA)
    cand = doc([measured(KEYS[0], numerics()), measured(KEYS[1], None, us=100.0)])
    cand["results"][1]["stats"]["noise_pct"] = 50.0       # too noisy: invalid, not judged
    c = compare(base, cand, gate(max_invalid_pct=50.0))
    assert c.shapes[1].status == "invalid" and not c.gate_failed


def test_documents_without_numerics_compare_as_before():
    c = pair([None, None], bases=[None, None])
    assert not c.numerics_required and all(v.numerics is None for v in c.shapes)
    assert c.numerics_summary is None and not c.gate_failed
    data = c.to_dict()
    assert data["numerics_summary"] is None and data["shapes"][0]["numerics"] is None
    assert report.numerics_line(c) is None
    for form in (report.text(c), report.markdown(c)):
        assert "numerics" not in form.lower()
    page = report.html_page(c, b"")
    assert ">numerics</th>" not in page and "Numerics:" not in page
    assert "numerics" not in report.html_columns(list(c.shapes))


def test_compare_json_carries_each_shapes_numerics():
    c = pair([numerics(sha="x", rms=1.1e-3), numerics()])
    data = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert data["numerics_summary"]["reordered"] == 1 and data["numerics_summary"]["identical"] == 1
    assert data["shapes"][0]["numerics"]["class"] == "reordered"
    assert data["gate"]["less_accurate_factor"] == gate().less_accurate_factor
    assert data["numerics_required"] is True


# the reports ------------------------------------------------------------------------------

def test_every_table_shows_the_class_next_to_the_status():
    c = pair([numerics(sha="x", rms={"out": 5e-3}), numerics(), numerics(max_abs={"lse": 0.1})])
    md = report.markdown(c)
    assert "| status | numerics | same code |" in md
    assert "less-accurate (out x5.00; rms_rel 1.00e-03 -> 5.00e-03)" in md and "| identical |" in md
    assert "### fwd: numerics" in md and f"- `{KEYS[2]}`: wrong (lse x10.00 tol)" in md
    assert "Numerics: 1 wrong, 0 nondeterministic, 1 less-accurate, 0 unmeasured, 0 reordered, 1 identical" in md
    text = report.text(c)
    assert "Numerics: 1 wrong" in text and any(line.startswith("ok          identical") for line in text.splitlines())
    page = report.html_page(c, b"")
    assert ">numerics</th>" in page and '<td class="numerics bad">less-accurate (out x5.00; rms_rel 1.00e-03 -&gt; 5.00e-03)</td>' in page
    columns = report.html_columns(list(c.shapes))
    assert columns[columns.index("status") + 1] == "numerics"


def test_a_regression_table_carries_the_class_too():
    base = doc([measured(KEYS[0], numerics())], commit=BASE_SHA)
    cand = doc([measured(KEYS[0], numerics(sha="x", rms=1.1e-3), us=150.0)])
    md = report.markdown(compare(base, cand, gate()))
    assert "| shape | delta % | status | numerics | threshold % |" in md
    assert "| regression | reordered (out x1.10; lse x1.10)" not in md      # one worst output, not a list
    assert "| regression | reordered (" in md


def test_report_files_hold_the_numerics(tmp_path):
    c = pair([numerics(sha="x", rms=1.1e-3), numerics()])
    paths = report.write_all(c, tmp_path)
    assert "reordered" in paths["md"].read_text() and "reordered" in paths["html"].read_text()


# the command ------------------------------------------------------------------------------

def test_perf_compare_accepts_less_accurate_by_glob(tmp_path, repo_root, capsys):
    base = write(tmp_path / "base.json", doc([measured(KEYS[0], numerics())], commit=BASE_SHA))
    cand = write(tmp_path / "cand.json", doc([measured(KEYS[0], numerics(sha="x", rms=5e-3))]))
    args = ["--root", str(repo_root), "perf", "compare", str(base), str(cand)]
    assert main(args) == ExitCode.GATE_FAILED
    assert "less accurate than the base" in capsys.readouterr().out
    assert main(args + ["--accept-less-accurate", "dense_b1_*", "--format", "json"]) == ExitCode.OK
    out = json.loads(capsys.readouterr().out)
    assert out["shapes"][0]["numerics_accepted"] is True and out["accept_less_accurate"] == ["dense_b1_*"]


def test_perf_measure_takes_the_option(repo_root, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--root", str(repo_root), "perf", "measure", "--help"])
    assert exit_.value.code == 0
    assert "--accept-less-accurate" in capsys.readouterr().out
