"""Fast tests of the checksum machinery (no triton needed): resource parsing from real code
objects, the stored format, diff + explain, sample choice, CLI resolution."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from mha_ci.checksums import records
from mha_ci.checksums.diff import Difference, compare, render
from mha_ci.checksums.explain import explain
from mha_ci.checksums.records import CodeObjectFile, CodeObjectRecord
from mha_ci.checksums.resources import CodeObjectError, code_object_resources, cubin_resources, hsaco_resources
from mha_ci.jobs.context import JobContext

CODEOBJS = Path(__file__).resolve().parents[2] / "fixtures" / "checksums_toy" / "codeobjs"


# --------------------------------------------------------------------------- resources
def test_cubin_registers_and_spills_match_ptxas():
    res = cubin_resources((CODEOBJS / "spill_me-sm90-triton3.8-maxnreg128.cubin").read_bytes(), "spill_me")
    assert (res.registers, res.scratch_bytes, res.spills) == (128, 704, 176)   # ptxas -v, see README


def test_cubin_without_spills():
    res = cubin_resources((CODEOBJS / "toy_fwd-sm90-triton3.8.cubin").read_bytes(), "toy_fwd")
    assert (res.registers, res.spills) == (14, 0)


def test_cubin_unknown_kernel_is_an_error():
    with pytest.raises(CodeObjectError, match="no register count"):
        cubin_resources((CODEOBJS / "toy_fwd-sm90-triton3.8.cubin").read_bytes(), "other")


def test_hsaco_metadata_note():
    res = hsaco_resources((CODEOBJS / "spill_me-gfx942-triton3.8-1warp.hsaco").read_bytes(), "spill_me")
    assert res.registers == 324 and res.spills == 0
    assert res.extra["agprs"] == 68 and res.extra["sgprs"] == 106 and res.extra["sgpr_spill_count"] == 2


def test_not_an_elf():
    with pytest.raises(CodeObjectError):
        code_object_resources(b"not an elf at all", "cuda", "k")


# --------------------------------------------------------------------------- records
def rec(key="gfx950/forward/small_head/fwd/fp16-d64-plain", **kw) -> CodeObjectRecord:
    arch, pass_, bucket, kernel, _ = key.split("/")
    base = dict(key=key, arch=arch, bucket=bucket, sha256="a" * 64, shared_bytes=16384, registers=96, spills=0,
                pass_=pass_, kernel=kernel, num_warps=4, num_stages=1,
                config={"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}, config_hash="c1",
                source_hash="s1")
    base.update(kw)
    return CodeObjectRecord(**base)


def cfile(*recs, triton="3.4.0") -> CodeObjectFile:
    return CodeObjectFile({"name": "triton-3.4", "triton": triton}, tuple(recs))


def test_roundtrip_and_stored_form(tmp_path):
    path = tmp_path / "code_objects" / "triton-3.4.json"
    fresh = CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"}, (rec(),), {"agree": True}, (), {"total_s": 1})
    records.dump(fresh, path, stored=True)
    data = json.loads(path.read_text())
    assert data["schema"] == "mha-ci.codeobj/1"
    assert "stats" not in data and "determinism" not in data          # run details stay out of baselines
    assert set(data["records"][0]) >= {"key", "arch", "bucket", "sha256", "shared_bytes", "registers", "spills"}
    assert records.load(path).records == (rec(),)
    assert not list(path.parent.glob(".*"))                           # no temporary left behind


def test_schema_and_duplicates_are_refused(tmp_path):
    with pytest.raises(records.RecordFileError, match="schema"):
        records.parse({"schema": "mha-ci.perf/1", "records": []})
    dup = {"schema": records.SCHEMA, "records": [rec().to_json(), rec().to_json()]}
    with pytest.raises(records.RecordFileError, match="duplicate"):
        records.parse(dup)
    with pytest.raises(records.RecordFileError, match="lacks"):
        records.parse({"schema": records.SCHEMA, "records": [{"key": "k"}]})


def test_merge_keeps_other_archs_and_keys():
    a = rec("sm90/forward/default/fwd/fp16-d128-plain")
    b = rec("gfx950/forward/small_head/fwd/fp16-d64-plain")
    c = rec("gfx950/forward/default/fwd/fp16-d128-plain")
    new_b = replace(b, sha256="b" * 64)
    merged = records.merge(cfile(a, b, c), cfile(new_b), ["gfx950"], only="d64")
    assert {r.key: r.sha256[0] for r in merged.records} == {a.key: "a", b.key: "b", c.key: "a"}


def test_error_summary_picks_the_error_line():
    text = "at 47:17:\n    col_last = x\n                 ^\nNameError(\"Cannot access global variable LN2\")\n"
    assert records.error_summary(text).startswith("NameError")
    assert records.error_summary("  ^\n") == "^"


# --------------------------------------------------------------------------- diff + explain
def test_identical_files_have_no_differences():
    assert compare(cfile(rec()), cfile(rec())) == []


def test_config_change_is_explained_with_the_changed_keys():
    old = rec()
    new = rec(sha256="b" * 64, shared_bytes=106496, num_stages=3,
              config={**old.config, "num_stages": 3}, config_hash="c2")
    diffs = explain(compare(cfile(old), cfile(new)), cfile(old), cfile(new))
    assert len(diffs) == 1 and diffs[0].status == "changed"
    assert diffs[0].describe() == ("gfx950 small_head forward fwd fp16-d64-plain: shared 16384 -> 106496, "
                                   "num_stages 1 -> 3, sha changed")
    assert "config gfx950 forward.small_head changed: num_stages 1 -> 3" in diffs[0].why
    assert "kernel source" not in diffs[0].why


def test_source_and_toolchain_changes_are_named():
    old, new = rec(), rec(sha256="b" * 64, source_hash="s2")
    diffs = explain(compare(cfile(old), cfile(new, triton="3.8.0")), cfile(old), cfile(new, triton="3.8.0"))
    assert "kernel source of fwd changed" in diffs[0].why
    assert "toolchain: triton 3.4.0 -> 3.8.0" in diffs[0].why


def test_unexplained_change():
    old, new = rec(), rec(sha256="b" * 64)
    diffs = explain(compare(cfile(old), cfile(new)), cfile(old), cfile(new))
    assert diffs[0].why.startswith("unexplained")


def test_bucket_move_pairs_removed_and_added():
    old = rec("gfx950/forward/default/fwd/fp16-d64-plain")
    new = rec("gfx950/forward/small_head/fwd/fp16-d64-plain")
    diffs = explain(compare(cfile(old), cfile(new)), cfile(old), cfile(new))
    assert sorted(d.status for d in diffs) == ["added", "removed"]
    assert all("bucket move" in d.why for d in diffs)


def test_new_kernel_and_removed_variant():
    old = rec()
    extra = rec("gfx950/backward/small_head/bwd_dq/fp16-d64-plain")
    diffs = explain(compare(cfile(old), cfile(old, extra)), cfile(old), cfile(old, extra))
    assert [d.status for d in diffs] == ["added"] and "new kernel bwd_dq" in diffs[0].why
    diffs = explain(compare(cfile(old, extra), cfile(old)), cfile(old, extra), cfile(old))
    assert [d.status for d in diffs] == ["removed"] and "bwd_dq no longer exists" in diffs[0].why


def test_same_code_object_with_moved_config_is_a_note_not_a_failure():
    old, new = rec(), rec(config_hash="c2", config={"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4,
                                                     "num_stages": 1, "waves_per_eu": 2})
    diffs = explain(compare(cfile(old), cfile(new)), cfile(old), cfile(new))
    assert [d.status for d in diffs] == ["note"] and not diffs[0].is_failure
    table = render(diffs, title="t", total=1)
    assert "0 changed, 0 added, 0 removed of 1 variants (1 notes)" in table


def test_difference_records_must_match_its_status():
    # explain and describe tell added / removed / changed apart by the records present
    with pytest.raises(ValueError, match="added difference"):
        Difference("added", rec().key, rec(), rec())
    with pytest.raises(ValueError, match="removed difference"):
        Difference("removed", rec().key, None, rec())
    with pytest.raises(ValueError, match="changed difference"):
        Difference("changed", rec().key, rec(), None)
    assert Difference("removed", rec().key, rec(), None).record == rec()


def test_render_lists_why():
    old, new = rec(), rec(sha256="b" * 64, registers=128, source_hash="s2")
    table = render(explain(compare(cfile(old), cfile(new)), cfile(old), cfile(new)), title="T", total=7)
    assert table.splitlines()[0] == "T: 1 changed, 0 added, 0 removed of 7 variants"
    assert "regs 96 -> 128, sha changed" in table and "why: kernel source of fwd changed" in table


# --------------------------------------------------------------------------- verdict / job side
def test_judge_flags_missing_store_compile_errors_and_nondeterminism(tmp_path):
    from mha_ci.checksums.verify import Computed, judge

    out = tmp_path / "out" / "code_objects" / "triton-3.4.json"
    fresh = CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"}, (rec(),),
                           {"sample": [rec().key], "agree": False,
                            "mismatches": [{"key": rec().key, "record": "a", "fresh_1": "a", "fresh_2": "b"}],
                            "problems": []},
                           ({"key": "gfx950/forward/pe/fwd/x", "error": "at 1:2\n^\nNameError('LN2')"},), {})
    records.dump(fresh, out)
    arch = SimpleNamespace(name="gfx950", compile_target=("hip", "gfx950", 64))
    verdict = judge(tmp_path, Computed(records.load(out), out, 1.0), [arch])
    assert verdict.failed and verdict.missing_stored and verdict.nondeterministic
    assert "COMPILE ERROR (1 variants) gfx950/forward/pe/fwd/x: NameError('LN2')" in verdict.table
    assert "NONDETERMINISTIC" in verdict.table
    # with a stored file equal to the fresh records and a clean run: pass
    records.dump(fresh, tmp_path / "perf_baselines" / "code_objects" / "triton-3.4.json", stored=True)
    clean = replace(fresh, determinism={"sample": [rec().key], "agree": True}, errors=())
    records.dump(clean, out)
    verdict = judge(tmp_path, Computed(records.load(out), out, 1.0), [arch])
    assert not verdict.failed, verdict.table


def test_pick_sample_is_drawn_per_seed_one_per_arch_first():
    import random

    from mha_ci.payloads.checksums import pick_sample

    recs = [rec(f"{arch}/{p}/default/{k}/fp16-d{d}-causal") for arch in ("gfx942", "sm90")
            for p, k in (("forward", "fwd"), ("backward", "bwd_dq")) for d in (64, 128)]
    draws = {tuple(pick_sample(recs, 3, random.Random(seed))) for seed in range(40)}
    assert all(len(set(d)) == 3 and {k.split("/")[0] for k in d[:2]} == {"gfx942", "sm90"} for d in draws)
    assert len(draws) > 10                              # anew each run, not a fixed set
    assert {k for d in draws for k in d} == {r.key for r in recs}    # any variant may be drawn
    assert pick_sample(recs, 3, random.Random(7)) == pick_sample(recs, 3, random.Random(7))   # --seed repeats it


def _variant(key: str, source="s1", config="c1", inputs="i1"):
    return SimpleNamespace(key=key, source_hash=source, config_hash=config, inputs_hash=inputs)


def test_claims_of_the_stored_code_object_for_changed_inputs():
    from mha_ci.payloads.checksums import unchanged_claims

    stored = {r.key: r for r in (rec("sm90/forward/default/fwd/a", source_hash="s1", config_hash="c1", inputs_hash="i1"),
                                 rec("sm90/forward/default/fwd/b", source_hash="s1", config_hash="c1", inputs_hash="i1"),
                                 rec("sm90/forward/default/fwd/c", source_hash="s1", config_hash="c1", inputs_hash="i1"))}
    same = {"sha256": "a" * 64}
    variants = [_variant("sm90/forward/default/fwd/a"),                  # inputs as recorded: nothing to hide
                _variant("sm90/forward/default/fwd/b", source="s2"),     # kernel edited, same code claimed
                _variant("sm90/forward/default/fwd/c", config="c2"),     # config edited, other code claimed
                _variant("sm90/forward/default/fwd/d", inputs="i2")]     # not stored: verify says "added"
    hits = {"sm90/forward/default/fwd/a": same, "sm90/forward/default/fwd/b": same,
            "sm90/forward/default/fwd/c": {"sha256": "b" * 64}, "sm90/forward/default/fwd/d": same}
    assert unchanged_claims(variants, hits, stored) == {"sm90/forward/default/fwd/b"}
    # records of another Triton: every hit that claims a stored code object is a claim
    assert unchanged_claims(variants, hits, stored, triton_moved=True) == {"sm90/forward/default/fwd/a",
                                                                          "sm90/forward/default/fwd/b"}


def test_rechecks_take_every_claim_and_a_drawn_share_of_the_rest():
    import random

    from mha_ci.payloads.checksums import pick_rechecks

    hits = [f"k{i:03d}" for i in range(200)]
    picked = pick_rechecks(hits, {"k005", "k150"}, 0.05, random.Random(1))
    assert picked[:2] == ["k005", "k150"] and len(picked) == 2 + 10 and len(set(picked)) == 12
    assert picked == pick_rechecks(hits, {"k005", "k150"}, 0.05, random.Random(1))
    assert picked != pick_rechecks(hits, {"k005", "k150"}, 0.05, random.Random(2))
    assert sorted(pick_rechecks(hits, set(), 1.0, random.Random(1))) == hits
    assert pick_rechecks(hits, set(), 0.0, random.Random(1)) == []
    assert len(pick_rechecks(hits[:3], set(), 0.05, random.Random(1))) == 1     # at least one when there are hits


def test_a_hit_that_a_fresh_compile_contradicts_is_replaced_and_reported(tmp_path, monkeypatch):
    from mha_ci.checksums.cache import CompileCache
    from mha_ci.checksums.compile import CompileResult
    from mha_ci.payloads import checksums as payload

    cache = CompileCache(tmp_path / "cache")
    real = {"sha256": "a" * 64, "shared_bytes": 1024, "registers": 40, "spills": 0, "extra": {}, "seconds": 1.0,
            "error": None, "refused": None}
    cache.put("key-ok", real)
    cache.put("key-forged", real | {"sha256": "f" * 64})
    cache.put("key-lies-about-spills", real | {"spills": 0, "registers": 40})
    results = {k: cache.get(f"key-{k}") for k in ("ok", "forged", "lies-about-spills")}
    fresh = {"ok": CompileResult("ok", "a" * 64, 1024, 40, 0, {}, 2.0),
             "forged": CompileResult("forged", "a" * 64, 1024, 40, 0, {}, 2.0),
             "lies-about-spills": CompileResult("lies-about-spills", "a" * 64, 1024, 255, 12, {}, 2.0)}
    monkeypatch.setattr(payload, "compile_all", lambda tasks, jobs, progress: [progress(fresh[t]) for t in tasks])
    mismatches: list[dict] = []
    payload._compile(list(fresh), 1, results, cache, {k: f"key-{k}" for k in fresh}, 0.0,
                     rechecked=set(fresh), mismatches=mismatches)
    assert [m["key"] for m in mismatches] == ["forged", "lies-about-spills"]
    assert mismatches[0]["cached"] == "f" * 64 and mismatches[0]["fresh"] == "a" * 64
    assert results["forged"]["sha256"] == "a" * 64 and results["lies-about-spills"]["spills"] == 12
    assert cache.get("key-forged")["sha256"] == "a" * 64        # the entry now holds the fresh compile
    assert results["ok"]["seconds"] == 1.0                     # an entry that agrees stays as it was


def test_a_cache_mismatch_fails_verify_and_update_with_what_to_do(tmp_path):
    from mha_ci.checksums.verify import Computed, judge, update
    from mha_ci.errors import MhaCiError

    out = tmp_path / "out" / "code_objects" / "triton-3.4.json"
    check = {"seed": 7, "share": 1.0, "hits": 8, "claims": 0, "rechecked": [rec().key],
             "mismatches": [{"key": rec().key, "cached": "f" * 64, "fresh": "a" * 64, "found_by": "compiled again"}]}
    fresh = CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"}, (rec(),), {"sample": [rec().key], "agree": True,
                                                                                 "seed": 7}, cache_check=check)
    records.dump(fresh, out)
    records.dump(fresh, tmp_path / "perf_baselines" / "code_objects" / "triton-3.4.json", stored=True)
    arch = SimpleNamespace(name="gfx950", compile_target=("hip", "gfx950", 64))
    verdict = judge(tmp_path, Computed(records.load(out), out, 1.0), [arch])
    assert verdict.failed and verdict.cache_mismatches and not verdict.differences
    assert f"COMPILE CACHE: {rec().key}: the cached entry says sha ffffffffffffffff, a fresh compile gives " \
           "aaaaaaaaaaaaaaaa (compiled again); the cache is forged or corrupt" in verdict.table
    assert "compile cache: 1 of 8 hits compiled again (every hit of an --only run; seed 7): 1 differ" in verdict.table
    assert "(seed 7)" in verdict.table and verdict.to_json()["cache_check"]["seed"] == 7
    with pytest.raises(MhaCiError, match="not updating: 1 compile cache entries disagree"):
        update(tmp_path, Computed(records.load(out), out, 1.0), [arch])
    clean = replace(fresh, cache_check=check | {"mismatches": [], "share": 0.05, "claims": 1})
    records.dump(clean, out)
    verdict = judge(tmp_path, Computed(records.load(out), out, 1.0), [arch])
    assert not verdict.failed, verdict.table
    assert ("compile cache: 1 of 8 hits compiled again (1 claiming the stored code object for changed inputs (the "
            "notes above: `mha-ci checksums update` refreshes their records), 5% of the rest drawn; seed 7): "
            "identical") in verdict.table, verdict.table


def test_cli_resolution_errors(tmp_path):
    from mha_ci.commands.checksums import resolve
    from mha_ci.errors import ConfigError

    arch = SimpleNamespace(name="sm90", compile_target=("cuda", 90, 32))
    interp = SimpleNamespace(name="interpreter", compile_target=None)
    pipeline = SimpleNamespace(toolchains={"triton-3.4": object()}, archs={"sm90": arch, "interpreter": interp})
    args = SimpleNamespace(toolchain=["triton-3.5"], arch=None, root=tmp_path)
    with pytest.raises(ConfigError, match="did you mean 'triton-3.4'"):
        resolve(pipeline, args)
    args = SimpleNamespace(toolchain=["host"], arch=["interpreter"], root=tmp_path)
    with pytest.raises(ConfigError, match="no compile target"):
        resolve(pipeline, args)
    toolchains, archs = resolve(pipeline, SimpleNamespace(toolchain=["host,triton-3.4"], arch=None, root=tmp_path))
    assert [t.name if hasattr(t, "name") else t for t in toolchains][0] == "host" and archs == [arch]


def test_problem_matrix_is_sane():
    from mha_ci.checksums.variants import problem_matrix

    points = problem_matrix()
    labels = [p.label for p in points]
    assert len(labels) == len(set(labels)) and 30 <= len(points) <= 80


def test_launch_change_is_named_when_config_and_source_are_equal():
    old, new = rec(inputs_hash="i1"), rec(sha256="b" * 64, inputs_hash="i2")
    diffs = explain(compare(cfile(old), cfile(new)), cfile(old), cfile(new))
    assert diffs[0].why.startswith("launch: the compile inputs changed")


class CannedExecutor:
    """Stands in for venv/docker/host: checks the payload arguments, writes a canned result."""

    name = "canned"

    def __init__(self, codeobjs: CodeObjectFile, exit_code: int = 0):
        self.codeobjs, self.exit_code, self.runs = codeobjs, exit_code, []

    def run(self, payload):
        from mha_ci.executors.base import PayloadResult

        self.runs.append(payload)
        out = payload.args[payload.args.index("--out") + 1]
        records.dump(self.codeobjs, payload.out_dir / out)
        return PayloadResult(exit_code=self.exit_code, provenance={"wall_s": 0.5})


def test_run_job_passes_and_fails_through_the_runner_contract(tmp_path):
    from mha_ci.jobs.checksums import run_job
    from mha_ci.model.types import Arch, Job, Toolchain

    lock = tmp_path / "containers" / "triton-3.4" / "requirements.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("triton==3.4.0 \\\n    --hash=sha256:00\n")
    tc = Toolchain("triton-3.4", "golden", lock, lock.parent, {"triton": "3.4.0"})
    archs = {"gfx950": Arch("gfx950", "amd", "", "amd-gpu", (), None, ("hip", "gfx950", 64)),
             "interpreter": Arch("interpreter", "cpu", "", "none", (), None, None)}
    pipeline = SimpleNamespace(root=tmp_path, toolchains={"triton-3.4": tc}, archs=archs)
    job = Job("checksums", "interpreter", "triton-3.4")
    fresh = CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"}, (rec(),), {"sample": [rec().key], "agree": True})
    records.dump(fresh, tmp_path / "perf_baselines" / "code_objects" / "triton-3.4.json", stored=True)

    executor = CannedExecutor(fresh)
    result = run_job(job, JobContext(pipeline, executor, tmp_path / "out"))
    assert result.verdict == "pass" and result.exit_code == 0, result.message
    args = executor.runs[0].args
    assert "gfx950=hip:gfx950:64" in args and "interpreter" not in " ".join(args)
    assert "--lock-sha256" in args and executor.runs[0].module == "checksums"
    # the claims of the cache are checked against the stored records; the draws are the payload's
    assert args[args.index("--stored") + 1] == "perf_baselines/code_objects/triton-3.4.json"
    assert "--recheck" not in args and "--seed" not in args
    assert "code_objects/triton-3.4.verify.txt" in result.artifacts

    changed = replace(fresh, records=(rec(sha256="b" * 64, shared_bytes=106496),))
    result = run_job(job, JobContext(pipeline, CannedExecutor(changed), tmp_path / "out"))
    assert result.verdict == "fail" and result.exit_code == 1 and "1 variants differ" in result.message


def test_payload_without_result_is_not_a_pass(tmp_path):
    from mha_ci.checksums.verify import ChecksumsNoResult, compute
    from mha_ci.executors.base import PayloadResult
    from mha_ci.model.types import Arch, Toolchain

    class Crashing:
        name = "crash"

        def run(self, payload):
            return PayloadResult(exit_code=4)

    tc = Toolchain("host", "", tmp_path / "none", tmp_path, {})
    arch = Arch("sm90", "nvidia", "", "nvidia-gpu", (), None, ("cuda", 90, 32))
    with pytest.raises(ChecksumsNoResult, match="produced no result"):
        compute(tmp_path, tc, [arch], Crashing(), tmp_path / "out")


# --------------------------------------------------------------------------- resource gate
def _limited(name="sm90", shared=232448, registers=255):
    from mha_ci.model.types import Arch, ResourceLimits

    target = ("cuda", 90, 32) if name == "sm90" else ("hip", name, 64)
    return Arch(name, "nvidia" if name == "sm90" else "amd", "", "nvidia-gpu" if name == "sm90" else "amd-gpu",
                (), None, target, limits=ResourceLimits(shared, registers))


def test_breaches_name_variant_figure_and_limit():
    from mha_ci.checksums.limits import breaches

    big = rec("sm90/forward/default/fwd/bf16-d256-plain", shared_bytes=458752, registers=255)
    fits = rec("sm90/forward/large_head/fwd/bf16-d256-plain", shared_bytes=196608, registers=255)
    amd = rec("gfx942/backward/default/bwd_dkdv/fp16-d256-plain", shared_bytes=65537, registers=513)
    found = breaches([big, fits, amd], [_limited(), _limited("gfx942", 65536, 512)])
    assert [(b.key, b.figure) for b in found] == [
        ("gfx942/backward/default/bwd_dkdv/fp16-d256-plain", "registers"),
        ("gfx942/backward/default/bwd_dkdv/fp16-d256-plain", "shared memory"),
        ("sm90/forward/default/fwd/bf16-d256-plain", "shared memory")]
    text = found[-1].describe()
    assert "sm90/forward/default/fwd/bf16-d256-plain" in text and "458752" in text and "232448" in text
    # exactly at the limit fits (the limit is what the hardware allows)
    assert not breaches([rec("gfx942/forward/default/fwd/x", shared_bytes=65536)], [_limited("gfx942", 65536, 512)])


def test_spill_growth_counts_new_and_larger_spills_only():
    from mha_ci.checksums.limits import spill_growth, spill_summary

    stored = cfile(rec("gfx942/forward/pe/fwd/a", spills=10), rec("gfx942/forward/pe/fwd/b", spills=5),
                   rec("gfx942/forward/pe/fwd/c"))
    fresh = cfile(rec("gfx942/forward/pe/fwd/a", spills=10), rec("gfx942/forward/pe/fwd/b", spills=3),
                  rec("gfx942/forward/pe/fwd/c", spills=1), rec("gfx942/forward/pe/fwd/d", spills=7),
                  rec("gfx942/forward/pe/fwd/e"))
    grown = spill_growth(stored, fresh)
    assert [(g.key.rsplit("/", 1)[1], g.before, g.after) for g in grown] == [("c", 0, 1), ("d", None, 7)]
    lines = spill_summary(fresh.records)
    assert lines == ["  spills on gfx942: 4 variants (worst: forward/pe/fwd/a 10, forward/pe/fwd/d 7, "
                     "forward/pe/fwd/b 3, forward/pe/fwd/c 1)"]
    assert spill_summary([rec()]) == ["  spills: none"]


def test_judge_fails_on_limits_and_spill_growth(tmp_path):
    from mha_ci.checksums.verify import Computed, judge

    out = tmp_path / "out" / "code_objects" / "triton-3.4.json"
    ok = rec("sm90/forward/default/fwd/fp16-d128-plain", shared_bytes=229376, spills=2)
    stored = CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"}, (ok,), {"sample": [], "agree": True})
    records.dump(stored, tmp_path / "perf_baselines" / "code_objects" / "triton-3.4.json", stored=True)
    records.dump(stored, out)
    verdict = judge(tmp_path, Computed(records.load(out), out, 1.0), [_limited()])
    assert not verdict.failed, verdict.table
    assert "spills on sm90: 1 variants" in verdict.table

    # the same record needing more shared memory than sm90 has, and spilling more
    over = replace(ok, shared_bytes=458752, spills=68)
    records.dump(replace(stored, records=(over,)), out)
    verdict = judge(tmp_path, Computed(records.load(out), out, 1.0), [_limited()])
    assert verdict.failed and len(verdict.over_limits) == 1 and len(verdict.spills_grown) == 1
    assert ("OVER LIMIT sm90/forward/default/fwd/fp16-d128-plain: shared memory 458752 bytes per block exceeds "
            "the sm90 limit of 232448") in verdict.table
    assert "SPILLS GREW sm90/forward/default/fwd/fp16-d128-plain: spills 68 (was 2)" in verdict.table
    assert verdict.to_json()["over_limits"][0]["limit"] == 232448


def test_update_refuses_code_objects_over_limits(tmp_path):
    from mha_ci.checksums.verify import Computed, OverLimits, update

    out = tmp_path / "out" / "code_objects" / "triton-3.4.json"
    records.dump(CodeObjectFile({"name": "triton-3.4"}, (rec("sm90/forward/default/fwd/x", shared_bytes=458752),),
                                {"sample": [], "agree": True}), out)
    with pytest.raises(OverLimits, match="exceed their arch's limits") as info:
        update(tmp_path, Computed(records.load(out), out, 1.0), [_limited()])
    assert info.value.exit_code == 1 and not (tmp_path / "perf_baselines").exists()


def test_every_compiled_arch_of_the_pipeline_has_limits(repo_root):
    from mha_ci.model.loader import load_pipeline

    archs = load_pipeline(repo_root).archs
    limits = {name: (a.limits.shared_bytes, a.limits.registers) for name, a in archs.items() if a.limits}
    assert limits == {"gfx942": (65536, 512), "gfx950": (163840, 512), "sm90": (232448, 255)}
    assert all(a.limits is None for a in archs.values() if a.compile_target is None)
