"""The perf gate: classification, refusals, stalls, exit codes of `mha-ci perf compare`."""
import json

import pytest

from mha_ci.cli import main
from mha_ci.perf.compare import compare
from mha_ci.perf.document import perf_from_dump

from perf_builders import doc, entry, gate, synthetic_dump, write  # noqa: E402

A = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
B = "dense_b1_hq128_hk8_sq8192_sk8192_dqk128_dv128_c1"
C = "varlen_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1"
D = "dense_b64_hq8_hk1_sq1_sk1024_dqk128_dv128_c1"
POLICY = gate(floor_pct=3.0, k=2.5, invalid_noise_pct=5.0)


def by_key(comparison):
    return {v.key: v for v in comparison.shapes}


def test_statuses_and_threshold_from_noise():
    base = doc([entry(A, 100.0, noise=0.4), entry(B, 1000.0, noise=0.4), entry(C, 500.0, noise=1.6),
                entry(D, 10.0, noise=0.4)])
    cand = doc([entry(A, 80.0, noise=0.4), entry(B, 1045.0, noise=0.4), entry(C, 522.5, noise=1.6),
                entry(D, 10.1, noise=0.4)])
    v = by_key(compare(base, cand, POLICY))
    assert v[A].status == "improvement" and v[A].delta_pct == pytest.approx(-20.0)
    # +4.5 % on a quiet shape: the floor (3 %) applies, it is a regression
    assert v[B].status == "regression" and v[B].threshold_pct == pytest.approx(3.0)
    # the same +4.5 % on a noisy shape: threshold 2.5 x sqrt(1.6^2 + 1.6^2) = 5.66 %, ok
    assert v[C].threshold_pct == pytest.approx(2.5 * (1.6 ** 2 * 2) ** 0.5)
    assert v[C].status == "ok"
    assert v[D].status == "ok"
    c = compare(base, cand, POLICY)
    assert c.summary == {"improvement": 1, "ok": 2, "regression": 1, "invalid": 0}
    assert c.gate_failed


def test_invalid_when_noisy_missing_or_failed():
    base = doc([entry(A, 100.0, noise=6.0), entry(B, 1000.0), entry(C, 500.0)])
    cand = doc([entry(A, 100.0), entry(B, None, error="RuntimeError: launch failed"), entry(D, 10.0)])
    c = compare(base, cand, POLICY)
    v = by_key(c)
    assert v[A].status == "invalid" and "too noisy" in v[A].reason
    assert v[B].status == "invalid" and "candidate failed" in v[B].reason
    assert v[C].status == "invalid" and v[C].reason == "not measured in the candidate"
    assert v[D].status == "invalid" and v[D].reason == "no baseline for this shape"
    assert c.summary["invalid"] == 4
    # a failed or missing candidate measurement is broken and fails the gate, naming the shape...
    assert [v.key for v in c.broken] == [B, C] and c.gate_failed
    assert c.failures == ["no shape was judged (4 invalid of 4): a verdict needs at least one improvement, "
                          "ok or regression",
                          f"broken measurement: {B}: candidate failed: RuntimeError: launch failed",
                          f"broken measurement: {C}: not measured in the candidate"]
    # ...a noisy shape and a shape new to the candidate do not, among enough judged ones...
    judged = [entry(key, 100.0) for key in many(40)]
    quiet = compare(doc([entry(A, 100.0, noise=6.0), *judged]), doc([entry(A, 100.0), entry(D, 10.0), *judged]),
                    POLICY)
    assert quiet.summary["invalid"] == 2 and not quiet.gate_failed
    assert compare(doc([entry(A, 100.0, noise=6.0), *judged]), doc([entry(A, 100.0), *judged]),  # ...unless asked to
                   gate(fail_on_invalid=True)).gate_failed


def many(n: int) -> list[str]:
    """`n` distinct shape keys, none of them A-D."""
    return [f"dense_b{i}_hq8_hk8_sq1024_sk1024_dqk128_dv128_c1" for i in range(100, 100 + n)]


def test_a_verdict_needs_a_judged_shape():
    c = compare(doc([entry(A, 100.0, noise=6.0), entry(B, 1000.0, noise=6.0)]),
                doc([entry(A, 150.0), entry(B, 1500.0)]), POLICY)
    assert c.judged == 0 and not c.broken and c.gate_failed
    assert c.failures[0].startswith("no shape was judged (2 invalid of 2)")
    assert compare(doc([]), doc([]), POLICY).failures[0].startswith("no shape was judged (0 invalid of 0)")


@pytest.mark.parametrize("invalid, total, fails", [(1, 20, False), (2, 39, True), (0, 20, False)])
def test_more_than_the_invalid_share_fails(invalid, total, fails):
    keys = many(total)
    base = doc([entry(key, 100.0, noise=6.0 if i < invalid else 0.5) for i, key in enumerate(keys)])
    c = compare(base, doc([entry(key, 100.0) for key in keys]), gate(max_invalid_pct=5.0))
    assert c.summary["invalid"] == invalid and c.gate_failed is fails
    if fails:
        assert c.failures == [f"{invalid} of {total} shapes invalid ({100 * invalid / total:.1f} %), "
                              "more than gate.max_invalid_pct 5 %"]
    assert compare(base, doc([entry(key, 100.0) for key in keys]),
                   gate(max_invalid_pct=0.0)).gate_failed is bool(invalid)


def test_between_run_noise_counts_against_the_invalid_limit_on_both_sides():
    keys = many(40)
    calm = doc([entry(key, 100.0) for key in keys])
    moved = doc([entry(key, 112.0 if key == keys[0] else 100.0) for key in keys])
    moved["results"][0]["stats"]["between_run_noise_pct"] = 8.0
    v = by_key(compare(calm, moved, POLICY))[keys[0]]
    assert v.status == "invalid" and v.reason == "too noisy: candidate noise 8.0 % (between runs) > 5.0 %"
    calm["results"][0]["stats"]["between_run_noise_pct"] = 4.0      # within the limit: it widens the threshold
    moved["results"][0]["stats"]["between_run_noise_pct"] = 0.1
    v = by_key(compare(calm, moved, POLICY))[keys[0]]
    assert v.status == "regression" and v.threshold_pct == pytest.approx(2.5 * (4.0 ** 2 + 0.5 ** 2) ** 0.5)


def test_a_candidate_without_selection_is_a_full_measurement():
    cand = doc([entry(A, 100.0)])
    del cand["selection"]
    c = compare(doc([entry(A, 100.0), entry(B, 1000.0)]), cand, POLICY)
    assert [v.key for v in c.broken] == [B] and c.not_measured == 0


@pytest.mark.parametrize("field, value, reason", [
    ("median_us", float("nan"), "candidate median_us is not a number: nan"),
    ("max_us", 0.0, "candidate max_us is not positive: 0.0"),
    ("max_us", "9", "candidate max_us is not a number: '9'"),
])
def test_a_median_or_max_that_is_not_a_positive_number_is_broken(field, value, reason):
    cand = doc([entry(A, 100.0)])
    cand["results"][0]["stats"][field] = value
    c = compare(doc([entry(A, 100.0)]), cand, POLICY)
    assert c.shapes[0].reason == reason and c.broken and c.gate_failed


def test_subset_candidate_does_not_count_unmeasured_baseline_shapes():
    base = doc([entry(A, 100.0), entry(B, 1000.0), entry(C, 500.0)])
    cand = doc([entry(A, 100.0)], subset="pr")
    c = compare(base, cand, POLICY)
    assert [v.key for v in c.shapes] == [A] and c.not_measured == 2
    assert c.summary == {"improvement": 0, "ok": 1, "regression": 0, "invalid": 0}


@pytest.mark.parametrize("change, expected", [
    ({"gpu": "NVIDIA H100 80GB HBM3"}, "different GPU"),
    ({"arch": "gfx950"}, "different arch"),
    ({"toolchain": "triton-3.8"}, "different toolchain"),
    ({"versions": {"torch": "2.13.0", "triton": "3.8.0"}}, "different triton"),
    ({"kernel": "sdpa"}, "different kernel"),
])
def test_provenance_mismatch_is_refused(change, expected):
    base = doc([entry(A, 100.0)])
    cand = doc([entry(A, 100.0)], **change)
    c = compare(base, cand, POLICY)
    assert c.refused and expected in c.refused
    assert c.summary["invalid"] == 1 and c.shapes[0].reason.startswith("not comparable")
    assert c.gate_failed


def test_cross_toolchain_allows_toolchains_but_never_another_gpu():
    base = doc([entry(A, 100.0)])
    cand = doc([entry(A, 100.0)], toolchain="triton-3.8", versions={"torch": "2.13.0", "triton": "3.8.0"})
    assert compare(base, cand, POLICY, cross_toolchain=True).refused is None
    other_gpu = doc([entry(A, 100.0)], toolchain="triton-3.8", gpu="NVIDIA H100")
    assert "GPU" in compare(base, other_gpu, POLICY, cross_toolchain=True).refused


def test_stall_is_flagged_even_when_the_mean_is_ok():
    stall = {"count": 1, "worst_us": 1_640_000.0, "ratio": 4205.1, "rep": 3, "index": 21}
    base = doc([entry(A, 390.0)])
    cand = doc([entry(A, 391.0, stall=stall)])
    c = compare(base, cand, POLICY)
    assert c.shapes[0].status == "ok" and c.shapes[0].stall == stall
    assert not c.gate_failed
    assert compare(base, cand, gate(fail_on_stall=True)).gate_failed


def test_fixture_stall_survives_to_the_comparison():
    dump = synthetic_dump()
    base = perf_from_dump(dump)
    cand = perf_from_dump(dump)
    c = compare(base, cand, POLICY)
    assert c.summary["ok"] == len(dump["shapes"])          # same data: every shape ok
    assert [v.key for v in c.stalled] == [A]


def test_json_contract():
    c = compare(doc([entry(A, 100.0), entry(B, 1000.0)]), doc([entry(A, 110.0), entry(B, 1000.0)]), POLICY)
    data = json.loads(json.dumps(c.to_dict()))
    assert set(data["summary"]) == {"improvement", "ok", "regression", "invalid"}
    for shape in data["shapes"]:
        assert {"key", "baseline_us", "candidate_us", "delta_pct", "threshold_pct", "status", "stall"} <= set(shape)
    assert {s["key"]: s["delta_pct"] for s in data["shapes"]} == {A: pytest.approx(10.0), B: 0.0}


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_cli_exit_codes(tmp_path, repo_root, capsys):
    base = write(tmp_path / "base.json", doc([entry(A, 100.0), entry(B, 1000.0)]))
    same = write(tmp_path / "same.json", doc([entry(A, 101.0), entry(B, 999.0)]))
    slow = write(tmp_path / "slow.json", doc([entry(A, 130.0), entry(B, 1000.0)]))
    other = write(tmp_path / "other.json", doc([entry(A, 100.0)], gpu="NVIDIA H100"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something-else"}')
    root = ["--root", str(repo_root)]
    assert main(root + ["perf", "compare", str(base), str(same)]) == 0
    capsys.readouterr()
    assert main(root + ["perf", "compare", str(base), str(slow), "--format", "json"]) == 1
    out = capsys.readouterr().out
    assert json.loads(out)["summary"]["regression"] == 1
    assert main(root + ["perf", "compare", str(base), str(other)]) == 1
    assert main(root + ["perf", "compare", str(base), str(bad)]) == 2
    assert main(root + ["perf", "compare", str(base), str(tmp_path / "missing.json")]) == 2
    assert main(root + ["perf", "compare", str(base), str(slow), "--format", "md", "--out", str(tmp_path / "r")]) == 1
    assert {p.name for p in (tmp_path / "r").iterdir()} == {"compare.json", "compare.md", "compare.txt",
                                                          "compare.png", "compare.html"}


def test_perf_yaml_sets_the_invalid_share_and_refuses_a_useless_one(pipeline_root, capsys):
    from mha_ci.model.loader import load_pipeline
    from mha_ci.perf.config import gate_policy

    assert gate_policy(load_pipeline(pipeline_root).perf).max_invalid_pct == 5.0
    perf_yaml = pipeline_root / "pipelines" / "perf.yaml"
    perf_yaml.write_text(perf_yaml.read_text().replace("max_invalid_pct: 5.0", "max_invalid_pct: 100"))
    assert main(["--root", str(pipeline_root), "validate"]) == 2
    err = capsys.readouterr().err
    assert "perf.yaml" in err and "max_invalid_pct" in err and "less than or equal to 50" in err


def test_a_same_code_move_is_an_aa_move_only_when_host_code_is_unchanged_too():
    """Seen on the H200: a config-only change's A/B called a same-code sink backward shape +1.7 %
    against a 1.5 % threshold. With identical code objects and host code that move cannot be the
    change's; with different code objects, or host code that changed, it is judged as before."""
    same, moved = KEYS_AA
    base = doc([entry(same, 100.0, noise=0.05), entry(moved, 100.0, noise=0.05)])
    head = doc([entry(same, 101.7, noise=0.05), entry(moved, 101.7, noise=0.05)])
    for d, other in ((base, "k1"), (head, "k2")):
        d["results"][0]["code_objects"] = {"bwd": "same"}
        d["results"][1]["code_objects"] = {"bwd": other}
    policy = gate(floor_pct=1.5)
    judged = {v.key: v for v in compare(base, head, policy).shapes}
    assert judged[same].status == judged[moved].status == "regression"
    comparison = compare(base, head, policy, unchanged_host=True)
    judged = {v.key: v for v in comparison.shapes}
    assert judged[same].status == "ok" and judged[same].reason.startswith("A/A move: +1.70 % beyond")
    assert judged[moved].status == "regression"
    assert comparison.to_dict()["aa_moves"] == [same] and comparison.to_dict()["unchanged_host"] is True
    assert comparison.gate_failed


KEYS_AA = ("dense_b1_hq8_hk1_sq8192_sk8192_dqk64_dv64_c0_wl128_wr0_sink_bwd",
           "dense_b1_hq128_hk8_sq8192_sk8192_dqk128_dv128_c0_bwd")
