"""Both passes through the gate: a backward regression, code-object identity, the --against floor,
calibration per pass, and a planted slowdown that reaches only the candidate side."""
import json

from perf_builders import doc, entry, gate, write

from mha_ci.cli import main
from mha_ci.errors import ExitCode
from mha_ci.perf import calibrate, measure
from mha_ci.perf.compare import compare
from mha_ci.model.loader import load_pipeline
from mha_ci.perf.config import against_policy, gate_policy
from mha_ci.perf.request import perf_request

FWD = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
BWD = FWD + "_bwd"
POLICY = gate(floor_pct=3.0, k=2.0)


def test_a_backward_regression_is_flagged_on_the_backward_shape_only():
    base = doc([entry(FWD, 300.0), entry(BWD, 800.0)])
    cand = doc([entry(FWD, 301.0), entry(BWD, 880.0)])      # +10 % backward
    c = compare(base, cand, POLICY)
    status = {v.key: (v.pass_, v.status) for v in c.shapes}
    assert status == {FWD: ("fwd", "ok"), BWD: ("bwd", "regression")}
    assert c.summary_by_pass == {"fwd": {"improvement": 0, "ok": 1, "regression": 0, "invalid": 0},
                                 "bwd": {"improvement": 0, "ok": 0, "regression": 1, "invalid": 0}}
    assert c.gate_failed
    assert [v["pass"] for v in c.to_dict()["shapes"]] == ["fwd", "bwd"]


def test_same_code_marks_shapes_whose_code_objects_are_identical():
    def with_code(e, sha):
        e["code_objects"] = {"bwd_dkdv": sha, "bwd_dq": "d" * 64}
        return e

    base = doc([with_code(entry(FWD, 300.0), "a" * 64), with_code(entry(BWD, 800.0), "b" * 64),
                entry("varlen_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1", 300.0)])
    cand = doc([with_code(entry(FWD, 300.0), "a" * 64), with_code(entry(BWD, 800.0), "c" * 64),
                entry("varlen_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1", 300.0)])
    c = compare(base, cand, POLICY)
    assert [v.same_code for v in c.shapes] == [True, False, None]      # None: not recorded
    assert c.to_dict()["same_code"] == 1


def test_against_has_its_own_floor_from_perf_yaml(repo_root):
    spec = load_pipeline(repo_root).perf
    assert against_policy(gate_policy(spec), spec).floor_pct == spec.against.floor_pct
    assert against_policy(gate_policy(spec), spec).k == gate_policy(spec).k


def test_calibration_reports_each_pass_and_judges_a_planted_run_against_its_own_base(tmp_path, repo_root):
    keys = [FWD, BWD, "dense_b1_hq8_hk1_sq8192_sk8192_dqk64_dv64_c0_wl128_wr0_sink_bwd"]
    a = doc([entry(k, us) for k, us in zip(keys, (300.0, 800.0, 50.0))])
    b = doc([entry(k, us * 1.001) for k, us in zip(keys, (300.0, 800.0, 50.0))])
    # the planted run's own base ran 5 % slower than A (another moment of the session): judged
    # against A, the 3 % plant would vanish; against its own base it is caught
    planted_base = doc([entry(k, us * 1.05) for k, us in zip(keys, (300.0, 800.0, 50.0))])
    planted = doc([{**entry(k, us * 1.05 * 1.03), "planted_pct": 3.0} for k, us in zip(keys, (300.0, 800.0, 50.0))])
    policy = gate(floor_pct=1.5, k=2.0)
    result = calibrate.calibrate(a, b, policy, planted=planted, planted_base=planted_base, min_us=100.0)
    assert result["shapes_valid"] == 2                                   # the 50 us shape is left out
    assert set(result["by_pass"]) == {"fwd", "bwd"}
    assert result["planted"]["caught"] == 2 and result["planted"]["by_pass"]["bwd"] == {"planted_shapes": 1,
                                                                                         "caught": 1}
    against_a = calibrate.calibrate(a, b, policy, planted=planted, min_us=100.0)
    assert against_a["planted"]["caught"] == 2                           # +8 % against A
    # through the command line, with the --against floor of perf.yaml
    paths = [write(tmp_path / f"{n}.json", d) for n, d in
             (("a", a), ("b", b), ("p", planted), ("pb", planted_base))]
    code = main(["--root", str(repo_root), "perf", "calibrate", str(paths[0]), str(paths[1]), "--planted",
                 str(paths[2]), "--planted-base", str(paths[3]), "--min-us", "100", "--floor-pct", "1.5",
                 "--format", "json", "--out", str(tmp_path / "out")])
    stored = json.loads((tmp_path / "out" / "calibrate.json").read_text())
    assert stored["gate"]["floor_pct"] == 1.5 and stored["min_us"] == 100.0
    # two judgements show no false-regression rate: red, and saying which bar
    unmet = [c["bar"] for c in stored["verdict"]["checks"] if not c["met"]]
    assert code == ExitCode.GATE_FAILED and unmet == ["false_regressions_shown"]
    assert main(["--root", str(repo_root), "perf", "calibrate", str(paths[0]), str(paths[1]),
                 "--planted-base", str(paths[3])]) == ExitCode.CONFIG_ERROR


def test_a_planted_slowdown_goes_to_the_candidate_side_only(monkeypatch, tmp_path, repo_root):
    """The interleaved sides run through run_payload; the executor sees the plant on the head only."""
    from mha_ci.model.loader import load_pipeline

    envs = {}

    class Recorder:
        name = "fake"

        def run(self, payload):
            out_name = payload.args[payload.args.index("--out") + 1].split("/")[-1]
            envs[out_name] = {k: v for k, v in payload.env.items() if k.startswith("MHA_PERF_PLANT")}
            raise RuntimeError("stop here")

    monkeypatch.setenv("MHA_PERF_PLANT_SLOWDOWN", "3")
    request = perf_request(load_pipeline(repo_root), arch="sm90", toolchains=("triton-3.4",), subset="pr",
                           out_dir=tmp_path, executor=None)
    try:
        measure.measure_against(request, measure.write_inputs(request, "rel"), (Recorder(), Recorder()),
                                ("a" * 40, None))
    except RuntimeError:
        pass
    assert envs == {"perf-base.json": {}, "perf-head.json": {"MHA_PERF_PLANT_SLOWDOWN": "3"}}
