"""The slices of the checksums shards: every key in exactly one, by the key alone, and a shard's
verdict compares exactly its slice of the stored records (a removed variant included)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from mha_ci.checksums import records
from mha_ci.checksums.records import CodeObjectFile, CodeObjectRecord
from mha_ci.checksums.slices import Slice, parse
from mha_ci.checksums.verify import Computed, judge, out_folder

ARCH = SimpleNamespace(name="gfx950", compile_target=("hip", "gfx950", 64))
KEYS = [f"gfx950/forward/default/fwd/fp16-d{d}-{f}" for d in (16, 48, 64, 80, 128, 160, 224, 256)
        for f in ("plain", "causal", "window", "sink", "varlen")]


def record(key: str, sha: str = "a" * 64) -> CodeObjectRecord:
    arch, pass_, bucket, kernel, _ = key.split("/")
    return CodeObjectRecord(key=key, arch=arch, bucket=bucket, sha256=sha, shared_bytes=1024, registers=64, spills=0,
                            pass_=pass_, kernel=kernel, num_warps=4, num_stages=1, config={}, config_hash="c",
                            source_hash="s")


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_the_slices_split_every_key_exactly_once(count):
    slices = [Slice(k, count) for k in range(1, count + 1)]
    for key in KEYS:
        assert sum(s.holds(key) for s in slices) == 1, key
    if count <= 4:       # 40 keys: no slice of a few is empty
        assert all(any(s.holds(key) for key in KEYS) for s in slices)


def test_a_key_keeps_its_slice_whatever_else_is_enumerated():
    owner = {key: next(k for k in range(1, 5) if Slice(k, 4).holds(key)) for key in KEYS}
    assert {key: next(k for k in range(1, 5) if Slice(k, 4).holds(key)) for key in reversed(KEYS[:7])} == \
        {key: owner[key] for key in KEYS[:7]}


def test_parse_and_refusals():
    assert parse("2/4") == Slice(2, 4) and str(Slice(2, 4)) == "2/4"
    for bad in ("0/4", "5/4", "2", "a/b", "2/0", "-1/4"):
        with pytest.raises(ValueError):
            parse(bad)


def test_each_shard_judges_its_slice_and_finds_a_removed_variant(tmp_path):
    """Stored: every key. Fresh: every key but one (a variant gone). Each shard compiles its slice;
    only the shard owning the gone key reports it, and no shard calls the other slices removed."""
    gone = KEYS[5]
    records.dump(CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"}, tuple(record(k) for k in KEYS)),
                 tmp_path / "perf_baselines" / "code_objects" / "triton-3.4.json", stored=True)
    failed_by = []
    for index in range(1, 5):
        slice_ = Slice(index, 4)
        fresh = CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"},
                               tuple(record(k) for k in KEYS if k != gone and slice_.holds(k)),
                               {"sample": [], "agree": True}, (), {})
        out = tmp_path / "out" / out_folder(slice_) / "triton-3.4.json"
        records.dump(fresh, out)
        verdict = judge(tmp_path, Computed(records.load(out), out, 1.0), [ARCH], slice_=slice_)
        if verdict.failed:
            failed_by.append(index)
            assert [(d.status, d.key) for d in verdict.differences if d.is_failure] == [("removed", gone)]
    assert failed_by == [next(k for k in range(1, 5) if Slice(k, 4).holds(gone))]


def test_shards_of_one_run_keep_their_own_files():
    assert out_folder(None) == "code_objects"
    assert len({out_folder(Slice(k, 4)) for k in range(1, 5)}) == 4


class SliceExecutor:
    """Stands in for the payload: compiles (records) the slice it is asked for, from `keys`."""

    name, pin_mode = "fake", "enforce"

    def __init__(self, keys: list[str]) -> None:
        self.keys, self.args = keys, []

    def run(self, payload):
        from mha_ci.executors.base import PayloadResult

        args = list(payload.args)
        self.args.append(args)
        slice_ = parse(args[args.index("--slice") + 1]) if "--slice" in args else None
        kept = tuple(record(k) for k in self.keys if slice_ is None or slice_.holds(k))
        sample = int(args[args.index("--determinism-sample") + 1])
        records.dump(CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"}, kept, {"sample": [], "agree": True},
                                    (), {"determinism_sample": sample}),
                     payload.out_dir / args[args.index("--out") + 1])
        return PayloadResult(exit_code=0)


def test_a_checksums_shard_job_compiles_and_judges_its_slice(repo_root, tmp_path):
    """`mha-ci run --job checksums-interpreter-triton-3.4-KofN`: the job id's shard is the slice the
    payload compiles and the verdict compares; the determinism sample is split over the shards."""
    from dataclasses import replace as replaced

    from mha_ci.jobs import checksums as checksums_job
    from mha_ci.jobs.context import JobContext
    from mha_ci.model.loader import load_pipeline
    from mha_ci.plan.matrix import runnable_jobs

    pipeline = load_pipeline(repo_root)
    root = tmp_path / "checkout"
    records.dump(CodeObjectFile({"name": "triton-3.4", "triton": "3.4.0"}, tuple(record(k) for k in KEYS)),
                 root / "perf_baselines" / "code_objects" / "triton-3.4.json", stored=True)
    pipeline = replaced(pipeline, root=root, archs={"gfx950": replaced(pipeline.archs["gfx950"])})
    shards = [j for j in runnable_jobs(load_pipeline(repo_root)) if j.kind == "checksums" and j.toolchain == "triton-3.4"]
    assert [j.id for j in shards] == [f"checksums-interpreter-triton-3.4-{k}of4" for k in range(1, 5)]
    executor = SliceExecutor(KEYS)
    seen: set[str] = set()
    for job in shards:
        result = checksums_job.run_job(job, JobContext(pipeline, executor, tmp_path / "out"))
        assert result.verdict == "pass", result.message
        assert result.details["slice"] == f"{job.shard}/4" and f"slice {job.shard}/4" in result.message
        assert executor.args[-1][executor.args[-1].index("--slice") + 1] == f"{job.shard}/4"
        assert executor.args[-1][executor.args[-1].index("--determinism-sample") + 1] == "1"
        assert result.artifacts[0] == f"code_objects/slice-{job.shard}of4/triton-3.4.json"
        seen |= {r.key for r in records.load(tmp_path / "out" / result.artifacts[0]).records}
    assert seen == set(KEYS)
