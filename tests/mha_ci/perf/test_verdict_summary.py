"""A perf verdict where a reader first looks: summary.md (the step summary) names the regressed and
improved shapes with delta, threshold, noise and code-object change, offers the next commands, and
stays under GitHub's comment limit; compare.md opens with the verdict and a narrow regressions table."""
import shlex

from mha_ci import cli
from mha_ci.perf import report
from mha_ci.perf.compare import compare
from mha_ci.reports import summary

from perf_builders import doc, entry, gate  # noqa: E402

FWD = ["dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1", "dense_b1_hq128_hk8_sq8192_sk8192_dqk128_dv128_c1"]
BWD = [FWD[0] + "_bwd", FWD[1] + "_bwd"]
CODE = {"attn_fwd": "f" * 64, "attn_bwd_dkdv": "a" * 64}
JOB = "perf-sm90-triton-3.4"
REPORT = f"jobs/{JOB}/compare.json"


def coded(e: dict, code: dict) -> dict:
    e["code_objects"] = dict(code)
    return e


def moved_comparison():
    """fwd: one shape 20 % faster on the same code; bwd: one shape +10 % on new code, one ok."""
    changed = {**CODE, "attn_bwd_dkdv": "b" * 64}
    base = doc([coded(entry(FWD[0], 100.0), CODE), coded(entry(FWD[1], 200.0), CODE),
                coded(entry(BWD[0], 300.0), CODE), coded(entry(BWD[1], 400.0), CODE)], commit="a" * 40)
    cand = doc([coded(entry(FWD[0], 80.0), CODE), coded(entry(FWD[1], 200.4), CODE),
                coded(entry(BWD[0], 330.0), changed), coded(entry(BWD[1], 401.2), CODE)], commit="b" * 40)
    return compare(base, cand, gate())


def results(comparison) -> dict:
    verdict = report.verdict_details(comparison, "sm90", "triton-3.4", REPORT)
    job = {"job_id": JOB, "kind": "perf", "verdict": "fail", "reason": "pull request", "timings": {"total": 9.0},
           "message": "perf gate failed", "details": {"verdict": verdict}}
    return {"status": "finished", "exit_code": 1, "provenance": {}, "jobs": [job]}


def test_summary_leads_with_the_moved_shapes_and_the_next_commands():
    md = summary.render(results(moved_comparison()))
    assert md.index("## Perf verdict") < md.index("## Jobs")
    verdict = md[md.index("## Perf verdict"):md.index("## Jobs")]
    assert "**FAIL: 1 regression(s)**" in verdict
    assert "**bwd: 0 improvements, 1 ok, 1 regression, 0 invalid of 2 shapes**" in verdict
    assert (f"- `{BWD[0]}`: **+10.0 %** (threshold 3.0 %, noise 0.5 % / 0.5 %; code objects changed)"
            in verdict)
    assert f"- `{FWD[0]}`: **-20.0 %** (threshold 3.0 %, noise 0.5 % / 0.5 %; same code objects)" in verdict
    assert "Regressed (1):\n\n- `" in verdict and "Improved (1):\n\n- `" in verdict
    assert "<details><summary>All 2 regressed and improved shapes</summary>" in verdict
    assert f"`{REPORT[:-5]}.md`" in verdict
    commands = [line for line in verdict.splitlines() if line.startswith("mha-ci ")]
    good, bad = "a" * 40, "b" * 40
    assert commands == [
        f"mha-ci perf measure --arch sm90 --toolchain triton-3.4 --subset full --against {good} --shape {BWD[0]}",
        f"mha-ci perf bisect --good {good} --bad {bad} --arch sm90 --toolchain triton-3.4 --pass bwd "
        f"--shape {BWD[0]} --out out/bisect-sm90-triton-3.4-bwd",
        f"mha-ci tune --arch sm90 --toolchain triton-3.4 --pass backward --from-report {REPORT} "
        f"--bucket {_bucket(BWD[0])}"]


def test_no_bisect_is_offered_when_both_sides_are_one_commit():
    """Seen in the H200 PR job of a working-tree plant: `perf bisect --good X --bad X`. The change
    is uncommitted there, so there is no range to bisect; the repro and tune lines stay."""
    c = moved_comparison()
    from dataclasses import replace
    one = replace(c, candidate_provenance={**c.candidate_provenance, "commit": c.baseline_provenance["commit"]})
    steps = report.verdict_details(one, "sm90", "triton-3.4", REPORT)["next_steps"]
    assert [s["command"].split()[1] for s in steps] == ["perf", "tune"]
    assert "bisect" not in "".join(s["command"] for s in steps)


def _bucket(key: str) -> str:
    return next(v.bucket for v in moved_comparison().shapes if v.key == key)


def test_the_suggested_commands_parse_with_the_real_command_line():
    for step in report.verdict_details(moved_comparison(), "sm90", "triton-3.4", REPORT)["next_steps"]:
        argv = shlex.split(step["command"])
        assert argv[0] == "mha-ci"
        cli.build_parser().parse_args(argv[1:])     # an unknown flag exits 2


def test_a_full_set_of_regressions_stays_under_the_comment_limit_and_says_how_many_are_cut():
    keys = [f"dense_b1_hq{h}_hk{h}_sq{s}_sk{s}_dqk128_dv128_c1" for h in (8, 16, 32, 64, 128) for s in
            range(256, 256 * 401, 256)]
    base = doc([entry(k, 100.0) for k in keys])
    cand = doc([entry(k, 150.0 + i / 100) for i, k in enumerate(keys)])
    one = results(compare(base, cand, gate()))
    md = summary.render(one)
    assert len(md) < summary.COMMENT_LIMIT
    assert f"Regressed ({len(keys)}):" in md and f"- and {len(keys) - summary.SHOWN_SHAPES} more" in md
    listed = sum(1 for line in md.splitlines() if line.startswith("| fwd | `"))
    assert listed == report.MAX_VERDICT_SHAPES      # what results.json keeps
    assert f"| | {len(keys) - listed} more not listed" in md
    # four toolchains' jobs share the limit: each table is cut shorter, each says by how much
    four = dict(one, jobs=[dict(one["jobs"][0], job_id=f"perf-sm90-t{i}") for i in range(4)])
    md = summary.render(four)
    assert len(md) < summary.COMMENT_LIMIT and md.count("## Perf verdict") == 4
    listed = sum(1 for line in md.splitlines() if line.startswith("| fwd | `")) // 4
    assert 0 < listed < report.MAX_VERDICT_SHAPES
    assert md.count(f"| | {len(keys) - listed} more not listed") == 4


def test_compare_md_opens_with_the_verdict_and_a_narrow_regressions_table():
    md = report.markdown(moved_comparison())
    assert md.splitlines()[2] == "**FAIL: 1 regression(s)**"
    bwd = md[md.index("## Backward (bwd)"):]
    header = next(line for line in bwd.splitlines() if line.startswith("| shape"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert len(columns) <= 8 and columns.index("delta %") <= 2 and columns.index("status") <= 2
    regressions, others = bwd.split("### bwd: all other shapes")
    assert f"`{BWD[0]}`" in regressions and f"`{BWD[0]}`" not in others
    assert others.index("<details>") < others.index(f"`{BWD[1]}`") < others.index("</details>")
    assert report.markdown(compare(doc([entry(FWD[0], 100.0)]), doc([entry(FWD[0], 100.0)]), gate())) \
        .splitlines()[2].startswith("**PASS: ")
