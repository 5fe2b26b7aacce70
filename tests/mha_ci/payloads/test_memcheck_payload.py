"""The memcheck payload's judging, with a fake compute-sanitizer that prints what the real one
does (markers, reports, early exits): attribution, the fresh child after a report, the
self-test that must see its plant, known findings as strict xfail. No GPU, no torch."""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from mha_ci.payloads import memcheck, sanitizer

FAKE = textwrap.dedent(f"""\
    import json, sys
    argv = sys.argv[1:]
    args = argv[argv.index("child") + 1:]
    P = "{sanitizer.PREFIX}"
    M = "{sanitizer.MARKER}"
    print(P + " COMPUTE-SANITIZER")
    if "--plant" in args:
        tool = args[args.index("--plant") + 1]
        print(M + " begin plant-" + tool)
        if tool != "blind":
            print(P + " Invalid __global__ read of size 4 bytes")
            print(P + "     at {memcheck.PLANTED_KERNELS['memcheck']}+0x240 in memcheck_plant.py:22")
            sys.exit({sanitizer.ERROR_EXIT})
        print(M + " end plant-" + tool + " x")
        sys.exit(0)
    for label in args[args.index("--labels") + 1].split(","):
        if label == "boom":
            print("ImportError: the child could not start")
            sys.exit(1)
        print(M + " begin " + label)
        if label.startswith("oob"):
            print(P + " Invalid __global__ read of size 2 bytes")
            print(P + "     at attn_fwd+0x1c70 in forward.py:141")
            print(P + " ERROR SUMMARY: 1 error")
            sys.exit({sanitizer.ERROR_EXIT})
        if label.startswith("crash"):
            print("RuntimeError: CUDA error: an illegal instruction was encountered")
            sys.exit(1)
        print(M + " end " + label + " " + json.dumps({{"kernels": ["attn_fwd", "attn_bwd_dq"], "seconds": 0.1}}))
    print(P + " ERROR SUMMARY: 0 errors")
    """)


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_sanitizer.py"
    script.write_text(FAKE)
    binary = tmp_path / "compute-sanitizer"
    binary.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    binary.chmod(0o755)
    return str(binary)


def _points(*labels):
    return [{"label": label, "problem": {}, "variants": [{"key": f"sm90/forward/default/fwd/{label}", "function": "attn_fwd"}]}
            for label in labels]


def _check(fake, tmp_path, *labels, tool="memcheck"):
    return memcheck._check_points(fake, tool, _points(*labels), str(tmp_path / "problems.json"), tmp_path / "t.log", 60)


def test_a_clean_run_covers_every_variant(fake, tmp_path):
    results = _check(fake, tmp_path, "a", "b")
    assert [r["status"] for r in results] == ["clean", "clean"]
    assert memcheck._covered(_points("a", "b"), results) == (2, [])


def test_a_report_names_its_problem_and_kernel_and_the_rest_still_run(fake, tmp_path):
    results = {r["label"]: r for r in _check(fake, tmp_path, "a", "oob-1", "b", "oob-2", "c")}
    assert [results[k]["status"] for k in ("a", "oob-1", "b", "oob-2", "c")] == \
        ["clean", "reported", "clean", "reported", "clean"]
    first = results["oob-1"]["reports"][0]
    assert first["kernel"] == "attn_fwd" and first["headline"].startswith("Invalid __global__ read")
    text = memcheck._problem_text(results["oob-1"])
    assert "attn_fwd" in text and "oob-1" in text and "forward.py:141" in text


def test_a_crash_is_a_failure_not_a_pass(fake, tmp_path):
    results = {r["label"]: r for r in _check(fake, tmp_path, "crash-1", "b")}
    assert results["crash-1"]["status"] == "crashed"
    assert any("illegal instruction" in line for line in results["crash-1"]["tail"])
    assert results["b"]["status"] == "clean"


def test_each_crash_is_its_own_finding(fake, tmp_path):
    results = {r["label"]: r for r in _check(fake, tmp_path, "crash-1", "crash-2", "crash-3", "d")}
    assert [results[k]["status"] for k in ("crash-1", "crash-2", "crash-3", "d")] == ["crashed"] * 3 + ["clean"]


def test_children_that_never_start_a_problem_leave_the_rest_not_run(fake, tmp_path):
    results = {r["label"]: r for r in _check(fake, tmp_path, "a", "boom", "d")}
    assert results["a"]["status"] == "clean"
    assert results["boom"]["status"] == results["d"]["status"] == "not-run"
    assert "stopped before any problem" in results["d"]["why"]
    assert any("could not start" in line for line in results["d"]["tail"])


def test_the_self_test_must_see_the_plant(fake, tmp_path):
    seen = memcheck._self_test(fake, "memcheck", tmp_path / "s.log", 60)
    assert seen["status"] == "seen" and not seen["why"]
    missed = memcheck._self_test(fake, "blind", tmp_path / "s.log", 60)
    assert missed["status"] == "missed" and "a clean run would prove nothing" in missed["why"]


def test_the_planted_kernels_are_the_plant_modules():
    source = (Path(memcheck.__file__).parent / "memcheck_plant.py").read_text()
    for name in memcheck.PLANTED_KERNELS.values():
        assert f"def {name}(" in source


def test_known_findings_are_strict(fake, tmp_path):
    results = _check(fake, tmp_path, "oob-ws", "ws-clean", "other")
    known = [{"test": "memcheck::oob-ws", "reason": "r1"}, {"test": "memcheck::ws-*", "reason": "r2"}]
    memcheck.apply_known(results, known)
    by = {r["label"]: r for r in results}
    assert by["oob-ws"]["status"] == "known" and memcheck._problem_text(by["oob-ws"]) is None
    assert by["ws-clean"]["status"] == "fixed" and "remove its entry" in memcheck._problem_text(by["ws-clean"])
    assert by["other"]["status"] == "clean"


def test_junit_lists_self_tests_problems_and_uncovered_variants(fake, tmp_path):
    results = _check(fake, tmp_path, "a", "oob-1")
    memcheck.apply_known(results, [])
    junit = tmp_path / "j.xml"
    self_test = memcheck._self_test(fake, "memcheck", tmp_path / "s.log", 60)
    memcheck._junit(junit, "memcheck-sm90", [self_test], results, ["sm90/backward/x/bwd_dq/a"])
    text = junit.read_text()
    assert 'tests="4"' in text and 'failures="2"' in text
    assert "memcheck::self-test" in text and "coverage::sm90/backward/x/bwd_dq/a" in text


def test_the_child_is_run_with_the_caching_allocator_off():
    assert memcheck._child_env()["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"


def test_the_dense_geometries_reach_partial_tiles_and_the_gluon_forward():
    """Partial tiles for every Triton kernel (lengths a multiple of no tile from 16 to 256), and one
    geometry the Gluon forward takes, so its recorded variants are launched and covered too."""
    from mha.config import gluon_lengths_ok
    from mha_ci.payloads.memcheck_problems import DENSE
    ragged = [g for g in DENSE if all(n % tile for n in (g.seqlen_q, g.seqlen_k) for tile in (16, 32, 64, 128, 256))]
    assert len(ragged) == 2 and {g.seqlen_q > g.seqlen_k for g in ragged} == {True, False}
    assert any(gluon_lengths_ok(g.seqlen_q, g.seqlen_k, causal=True) for g in DENSE)



def test_the_whole_tile_geometry_walks_several_tiles_per_gluon_program(monkeypatch):
    """Its 8 query tiles (2 per slice, 4 query heads) on 3 programs; the variable is set only
    around that geometry's forward, and restored."""
    from mha import tile_schedule
    from mha_ci.payloads import memcheck_problems as problems
    assert problems.PROGRAMS_ENV == tile_schedule.PROGRAMS_ENV
    (whole,) = [g for g in problems.DENSE if g.gluon_programs]
    assert whole.batch * problems.HEADS_Q * (whole.seqlen_q // 128) > 2 * whole.gluon_programs
    monkeypatch.setenv(problems.PROGRAMS_ENV, "tiles")
    with problems._gluon_programs(3):
        assert os.environ[problems.PROGRAMS_ENV] == "3"
    assert os.environ[problems.PROGRAMS_ENV] == "tiles"
    monkeypatch.delenv(problems.PROGRAMS_ENV)
    with problems._gluon_programs(None):
        assert problems.PROGRAMS_ENV not in os.environ
    assert problems.PROGRAMS_ENV not in os.environ
