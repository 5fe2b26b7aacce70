"""End-to-end checksum tests: real ahead-of-time compiles in the triton-3.8 toolchain (venv
executor), on temp checkouts whose src/mha is a copy of the toy package in
tests/fixtures/checksums_toy/ (same interface as the real mha.launch; compiles in a fraction of a
second), restricted to the fp16 d64 problems on gfx942 and sm90 so the module stays near two
minutes. test_real_kernel_* does the same on a copy of the real src/mha.

Each test copies one baseline checkout (stored checksums written by `update`, compile cache
warm) and changes one thing in the copy.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mha_ci.cache import cache_root
from mha_ci.checksums import verify as checksums_job
from mha_ci.checksums import records
from mha_ci.checksums.slices import Slice
from mha_ci.cli import main
from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.venv import VenvExecutor
from mha_ci.model.loader import load_pipeline

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
TOY = Path(__file__).resolve().parents[2] / "fixtures" / "checksums_toy" / "mha"
ONLY = "fp16-d64-"
ARCHS = ("gfx942", "sm90")
# the toolchain environments: the machine's cache, read at import, before any fixture hides it
VENVS = cache_root()


def make_checkout(dest: Path, kernel_package: Path) -> Path:
    for name in ("pipelines", "containers"):
        shutil.copytree(REPO / name, dest / name)
    (dest / "src").mkdir(parents=True)
    os.symlink(REPO / "src" / "mha_ci", dest / "src" / "mha_ci")
    shutil.copytree(kernel_package, dest / "src" / "mha", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "tests" / "mha").mkdir(parents=True)
    (dest / "tests" / "mha" / "test_toy.py").write_text("def test_nothing():\n    assert True\n")
    return dest


def compute(root: Path, toolchain: str = "triton-3.8", only: str = ONLY, archs=ARCHS, sample: int = 1,
            recheck: float | None = None, slice_: Slice | None = None):
    pipeline = load_pipeline(root)
    chosen = [pipeline.archs[a] for a in archs]
    computed = checksums_job.compute(root, pipeline.toolchains[toolchain], chosen, VenvExecutor(root, cache=VENVS),
                                     root / "out", only=only, determinism_sample=sample, recheck=recheck,
                                     slice_=slice_)
    return computed, checksums_job.judge(root, computed, chosen, only, slice_)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = make_checkout(tmp_path_factory.mktemp("baseline"), TOY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHA_CI_CHECKSUMS_CACHE", str(root / ".cache" / "checksums"))
        computed, verdict = compute(root, sample=2)
        assert verdict.missing_stored and not verdict.compile_errors and not verdict.nondeterministic, verdict.table
        pipeline = load_pipeline(root)
        checksums_job.update(root, computed, [pipeline.archs[a] for a in ARCHS], ONLY)
    return root


@pytest.fixture
def checkout(baseline, tmp_path, monkeypatch):
    root = Path(shutil.copytree(baseline, tmp_path / "checkout", symlinks=True))
    # the copy's compile cache (warm from the baseline), for library calls and the CLI alike
    monkeypatch.setenv("MHA_CI_CHECKSUMS_CACHE", str(root / ".cache" / "checksums"))
    return root


def shas(computed) -> dict[str, str]:
    return {r.key: r.sha256 for r in computed.codeobjs.records}


def test_baseline_is_stored_and_verifies(baseline, checkout):
    stored = records.load(checkout / "perf_baselines" / "code_objects" / "triton-3.8.json")
    assert {r.arch for r in stored.records} == set(ARCHS) and len(stored.records) >= 8
    computed, verdict = compute(checkout)
    assert not verdict.failed, verdict.table
    assert computed.codeobjs.stats["compiled"] == 0          # warm: everything from the cache
    assert computed.codeobjs.determinism["agree"] and len(computed.codeobjs.determinism["sample"]) == 1


def test_a_second_clone_hits_what_the_first_compiled(baseline, tmp_path, monkeypatch):
    """Issue 40: the baseline (one clone) compiled into its cache; another clone of the same
    sources at another path, sharing that cache as the machine's (MHA_CI_CACHE), compiles nothing."""
    shared = tmp_path / "machine-cache"
    shutil.copytree(baseline / ".cache" / "checksums", shared / "checksums")
    monkeypatch.delenv("MHA_CI_CHECKSUMS_CACHE", raising=False)
    monkeypatch.setenv("MHA_CI_CACHE", str(shared))
    clone = make_checkout(tmp_path / "second-clone", TOY)
    shutil.copytree(baseline / "perf_baselines", clone / "perf_baselines")
    computed, verdict = compute(clone, recheck=0.0)
    assert not verdict.failed, verdict.table
    stats = computed.codeobjs.stats
    assert stats["compiled"] == 0 and stats["cached"] == stats["variants"] > 0


def test_the_payload_compiles_one_slice_and_the_slices_make_the_whole(checkout):
    """`--slice K/N` through the real payload: each shard's records are its slice of the variants,
    the slices are disjoint and together the stored set, and each shard's verdict passes."""
    stored = {r.key: r.sha256 for r in records.load(checkout / "perf_baselines" / "code_objects" / "triton-3.8.json").records}
    seen: dict[str, str] = {}
    for index in (1, 2):
        computed, verdict = compute(checkout, slice_=Slice(index, 2), recheck=0.0)
        assert not verdict.failed, verdict.table
        got = shas(computed)
        assert got and all(Slice(index, 2).holds(key) for key in got) and not set(got) & set(seen)
        assert computed.codeobjs.stats["slice"] == f"{index}/2" and computed.path.parent.name == f"slice-{index}of2"
        seen.update(got)
    assert seen == stored


def test_test_file_edit_changes_nothing_and_hits_the_cache(checkout):
    test_file = checkout / "tests" / "mha" / "test_toy.py"
    test_file.write_text(test_file.read_text() + "\n\ndef test_more():\n    assert 1 + 1 == 2\n")
    computed, verdict = compute(checkout)
    assert not verdict.failed, verdict.table
    assert computed.codeobjs.stats["compiled"] == 0


def test_comment_only_kernel_edit_changes_no_checksum(checkout):
    kernel = checkout / "src" / "mha" / "kernels" / "toy.py"
    text = kernel.read_text()
    # comments above the kernels (every line number moves) and inside one (a changed line)
    text = "# a comment that moves every line\n# and another\n" + text
    text = text.replace("    acc = tl.zeros(", "    # accumulate in fp32\n    acc = tl.zeros(")
    kernel.write_text(text)
    before = shas(checksums_job.Computed(records.load(checkout / "perf_baselines/code_objects/triton-3.8.json"),
                                         Path("x"), 0))
    computed, verdict = compute(checkout)
    assert computed.codeobjs.stats["compiled"] == computed.codeobjs.stats["variants"]   # the cache key moved ...
    assert shas(computed) == before                                                     # ... the code did not
    assert not verdict.failed, verdict.table


def test_num_warps_change_changes_exactly_that_bucket(checkout, capsys):
    config = checkout / "src" / "mha" / "configs" / "gfx942-MHA-DEFAULT.json"
    data = json.loads(config.read_text())
    data["forward"]["small_head"]["num_warps"] = 8
    config.write_text(json.dumps(data, indent=2))
    code = main(["--root", str(checkout), "checksums", "verify", "--toolchain", "triton-3.8",
                 "--arch", "gfx942", "--arch", "sm90", "--only", ONLY])
    out = capsys.readouterr().out
    assert code == 1, out
    verdict = json.loads((checkout / "out" / "code_objects" / "triton-3.8.verify.json").read_text())
    changed = [d for d in verdict["differences"] if d["status"] != "note"]
    expected = {r.key for r in records.load(checkout / "perf_baselines/code_objects/triton-3.8.json").records
                if r.key.startswith("gfx942/forward/small_head/")}
    assert expected and {d["key"] for d in changed} == expected
    assert all(d["status"] == "changed" and "num_warps 4 -> 8" in d["describe"] for d in changed)
    assert all("config gfx942 forward.small_head changed: num_warps 4 -> 8" in d["why"] for d in changed)
    assert "gfx942 small_head forward fwd fp16-d64-plain: " in out
    # only that bucket's variants miss the cache (its key names the bucket, not the whole file)
    stats = json.loads((checkout / "out" / "code_objects" / "triton-3.8.json").read_text())["stats"]
    assert stats["compiled"] == len(expected) < stats["variants"], stats
    # update stores it; verify passes again
    assert main(["--root", str(checkout), "checksums", "update", "--toolchain", "triton-3.8",
                 "--arch", "gfx942", "--arch", "sm90", "--only", ONLY]) == 0
    assert main(["--root", str(checkout), "checksums", "verify", "--toolchain", "triton-3.8",
                 "--arch", "gfx942", "--arch", "sm90", "--only", ONLY]) == 0


def test_kernel_source_change_is_caught_and_explained(checkout):
    kernel = checkout / "src" / "mha" / "kernels" / "toy.py"
    kernel.write_text(kernel.read_text().replace("return s * scale", "return s * scale * 0.5"))
    computed, verdict = compute(checkout)
    assert verdict.failed
    changed = [d for d in verdict.differences if d.is_failure]
    fwd_keys = {r.key for r in computed.codeobjs.records if r.kernel == "fwd"}
    assert {d.key for d in changed} == fwd_keys                # the backward kernel does not call _scale
    assert all(d.status == "changed" and "kernel source of fwd changed" in d.why for d in changed)


def test_nondeterministic_compile_is_its_own_failure(checkout):
    kernel = checkout / "src" / "mha" / "kernels" / "toy.py"
    text = kernel.read_text().replace(
        "import triton\n",
        "import random\nimport triton\n", 1).replace(
        "@triton.jit\ndef _scale",
        "SALT = triton.language.constexpr(random.SystemRandom().random())  # differs per process\n\n\n"
        "@triton.jit\ndef _scale").replace("return s * scale", "return s * scale + SALT").replace(
        "tl.sum(do.to(tl.float32), 1)", "tl.sum(do.to(tl.float32), 1) + SALT")
    # in every kernel: the sample is drawn anew each run, and may hold only backward variants
    assert text.count("+ SALT") == 2
    kernel.write_text(text)
    computed, verdict = compute(checkout, sample=2)
    assert verdict.nondeterministic and verdict.failed
    assert "NONDETERMINISTIC" in verdict.table
    assert computed.codeobjs.determinism["mismatches"]


def test_triton34_amd_without_lld_is_an_environment_error(checkout, monkeypatch):
    monkeypatch.setenv("TRITON_HIP_LLD_PATH", str(checkout / "no-such-ld.lld"))
    with pytest.raises(EnvironmentProblem, match="ld.lld"):
        compute(checkout, toolchain="triton-3.4", only="fp16-d64-plain", archs=("gfx942",))
    assert main(["--root", str(checkout), "checksums", "compute", "--toolchain", "triton-3.4",
                 "--arch", "gfx942", "--only", "fp16-d64-plain"]) == 3


def test_real_kernel_comment_edit_changes_no_checksum(tmp_path, monkeypatch):
    """The same property on a copy of the real kernel package: one forward variant on gfx942."""
    root = make_checkout(tmp_path / "real", REPO / "src" / "mha")
    monkeypatch.setenv("MHA_CI_CHECKSUMS_CACHE", str(root / ".cache" / "checksums"))
    only = "/fwd/fp16-d64-causal"
    first, verdict = compute(root, only=only, archs=("gfx942",))
    assert not verdict.compile_errors, verdict.table
    forward = root / "src" / "mha" / "kernels" / "forward.py"
    forward.write_text("# moved every line\n" + forward.read_text())
    second, verdict = compute(root, only=only, archs=("gfx942",))
    assert not verdict.compile_errors, verdict.table
    assert second.codeobjs.stats["compiled"] >= 1          # really recompiled after the edit
    assert shas(first) == shas(second) and len(shas(first)) >= 1


def test_oversized_config_is_refused_before_ptxas_in_seconds(tmp_path, monkeypatch, capsys):
    """The retune failure class, planted in a copy of the real package: 256x256 tiles in 8
    pipeline stages, far more than sm90's shared memory holds. ptxas on it takes minutes at
    11 GB; shared memory is known after the LLIR stage, so the compile stops there and the
    resource gate fails the job, naming variant, figure and limit, in seconds."""
    root = make_checkout(tmp_path / "real", REPO / "src" / "mha")
    monkeypatch.setenv("MHA_CI_CHECKSUMS_CACHE", str(root / ".cache" / "checksums"))
    config = root / "src" / "mha" / "configs" / "sm90-MHA-DEFAULT.json"
    data = json.loads(config.read_text())
    data["forward"]["small_head"].update(BLOCK_M=256, BLOCK_N=256, num_stages=8)
    config.write_text(json.dumps(data, indent=2))
    only = "sm90/forward/small_head/fwd/fp16-d64-plain"
    args = ["--toolchain", "triton-3.8", "--arch", "sm90", "--only", only]
    assert main(["--root", str(root), "checksums", "verify", *args]) == 1
    out = capsys.readouterr().out
    assert f"OVER LIMIT {only}: shared memory" in out and "exceeds the sm90 limit of 232448" in out, out
    fresh = records.load(root / "out" / "code_objects" / "triton-3.8.json")
    assert fresh.records == () and [r["key"] for r in fresh.refused] == [only]       # no code object
    assert fresh.stats["compile_s"] < 120, fresh.stats       # ptxas alone took minutes
    verdict = json.loads((root / "out" / "code_objects" / "triton-3.8.verify.json").read_text())
    assert [(b["key"], b["figure"], b["limit"]) for b in verdict["over_limits"]] == [(only, "shared memory", 232448)]
    assert verdict["over_limits"][0]["value"] > 232448
    # compute and update fail alike and store nothing: tests/mha_ci/fault_injection/test_checksums_inputs.py


def test_only_matching_no_variant_is_a_usage_error(tmp_path, capsys):
    root = make_checkout(tmp_path / "toy", TOY)
    args = ["--toolchain", "triton-3.8", "--arch", "sm90", "--only", "fp16-d64-plian"]
    assert main(["--root", str(root), "checksums", "verify", *args]) == 2
    err = capsys.readouterr().err
    assert "no variant matches --only 'fp16-d64-plian'" in err and "closest keys: sm90/" in err, err


def _cache_entry_of(checkout: Path, sha: str) -> Path:
    found = [p for p in (checkout / ".cache" / "checksums").rglob("*.json") if json.loads(p.read_text())["sha256"] == sha]
    assert len(found) == 1, found
    return found[0]


def test_a_forged_cache_entry_with_a_matching_record_fails_verify_only(checkout, capsys):
    """Issue 34's probe: a variant outside the determinism sample (a backward one: the sample
    used to be the forward kernels) gets a forged sha in the compile cache and the same sha in
    the stored record. `verify --only` compiles every variant it selects again, so it fails."""
    stored_path = checkout / "perf_baselines" / "code_objects" / "triton-3.8.json"
    stored = json.loads(stored_path.read_text())
    victim = next(r for r in stored["records"] if "/backward/" in r["key"])
    real, forged = victim["sha256"], "f" * 64
    entry = _cache_entry_of(checkout, real)
    entry.write_text(entry.read_text().replace(real, forged))
    stored_path.write_text(json.dumps(stored).replace(real, forged))
    args = ["--toolchain", "triton-3.8", "--arch", "gfx942", "--arch", "sm90", "--only", ONLY]
    code = main(["--root", str(checkout), "checksums", "verify", *args])
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"COMPILE CACHE: {victim['key']}: the cached entry says sha {forged[:16]}" in out, out
    assert json.loads(entry.read_text())["sha256"] == real          # the entry now holds the fresh compile
    assert main(["--root", str(checkout), "checksums", "verify", "--no-cache", *args]) == 1


def test_a_forged_claim_of_no_change_is_compiled_again_whatever_the_share(checkout):
    """A kernel edit changes the forward variants' code objects; their cache entries (new keys:
    the sources changed) are then forged to claim the stored code objects, as an author hiding
    the change would. With no random share at all (recheck 0), each hit that claims the stored
    code object for changed inputs is still compiled again: the run fails naming the cache."""
    kernel = checkout / "src" / "mha" / "kernels" / "toy.py"
    kernel.write_text(kernel.read_text().replace("return s * scale", "return s * scale * 0.5"))
    computed, verdict = compute(checkout)
    changed = {d.key for d in verdict.differences if d.is_failure}
    assert changed and all(d.status == "changed" for d in verdict.differences if d.is_failure), verdict.table
    stored = records.load(checkout / "perf_baselines" / "code_objects" / "triton-3.8.json").by_key()
    for record in computed.codeobjs.records:
        if record.key in changed:
            entry = _cache_entry_of(checkout, record.sha256)
            data = json.loads(entry.read_text())
            old = stored[record.key]
            data.update(sha256=old.sha256, shared_bytes=old.shared_bytes, registers=old.registers, spills=old.spills,
                        extra=old.extra)
            entry.write_text(json.dumps(data))
    computed, verdict = compute(checkout, recheck=0.0)
    assert {m["key"] for m in verdict.cache_mismatches} == changed, verdict.table
    assert computed.codeobjs.cache_check["claims"] == len(changed) and verdict.failed
    assert {d.key for d in verdict.differences if d.is_failure} == changed      # the fresh compiles are the records
