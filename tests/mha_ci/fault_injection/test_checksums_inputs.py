"""Fault injection, checksums: broken stored records, an --only that matches nothing, and an
over-limit variant refused before code generation (issue 24). No Triton here: the payload is
stood in for by an executor that writes what the real one would; the slow tests of
tests/mha_ci/checksums/test_compile.py run the real payload."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha_ci.checksums import records
from mha_ci.checksums.records import CodeObjectFile, CodeObjectRecord
from mha_ci.cli import main
from mha_ci.executors.base import PayloadResult

STORED = Path("perf_baselines") / "code_objects" / "triton-3.8.json"
KEY = "sm90/forward/small_head/fwd/fp16-d64-plain"
TOOLCHAIN = {"name": "triton-3.8", "triton": "3.8.0"}


def record(key: str = KEY, **kw) -> dict:
    arch, pass_, bucket, kernel, _ = key.split("/")
    base = dict(key=key, arch=arch, bucket=bucket, sha256="a" * 64, shared_bytes=16384, registers=96, spills=0,
                pass_=pass_, kernel=kernel, num_warps=8, num_stages=3)
    return CodeObjectRecord(**base).to_json() | kw


def stored_text(*recs: dict) -> str:
    return json.dumps({"schema": records.SCHEMA, "toolchain": TOOLCHAIN, "records": list(recs or [record()])})


class Payload:
    """Stands in for the executor: records each run and writes `fresh` (or raw bytes) as the
    payload's result file, exiting with `exit_code`."""

    name = "stand-in"

    def __init__(self, fresh: CodeObjectFile | bytes | None = None, exit_code: int = 0) -> None:
        self.fresh, self.exit_code, self.runs = fresh, exit_code, []

    def run(self, payload) -> PayloadResult:
        self.runs.append(payload)
        out = payload.out_dir / payload.args[payload.args.index("--out") + 1]
        out.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(self.fresh, bytes):
            out.write_bytes(self.fresh)
        elif self.fresh is not None:
            records.dump(self.fresh, out)
        return PayloadResult(exit_code=self.exit_code, provenance={"wall_s": 0.1})


@pytest.fixture
def checkout(pipeline_root, monkeypatch):
    """A checkout whose executor is the stand-in (set `checkout.payload` before the call)."""
    state = {"payload": Payload(CodeObjectFile(TOOLCHAIN, (CodeObjectRecord.from_json(record()),)))}
    # The command's own binding: commands import make_executor at module level.
    monkeypatch.setattr("mha_ci.commands.checksums.make_executor", lambda name, root, **kw: state["payload"])
    pipeline_root.joinpath(STORED).parent.mkdir(parents=True)
    pipeline_root.joinpath(STORED).write_text(stored_text())
    return pipeline_root, state


def checksums(root: Path, action: str, *extra: str) -> int:
    return main(["--root", str(root), "checksums", action, "--toolchain", "triton-3.8", "--arch", "sm90",
                 "--out", str(root / "out"), *extra])


def _nested(depth: int) -> bytes:
    return b'{"schema": "mha-ci.codeobj/1", "toolchain": {}, "records": ' + b"[" * depth + b"]" * depth + b"}"


GOOD = stored_text().encode()
# (id, the stored file's bytes, what the message must say)
CORRUPT = [
    ("empty", b"", "not JSON (empty)"),
    ("truncated", GOOD[: len(GOOD) // 2], "not JSON: "),
    ("not-utf8", GOOD.replace(b"small_head", b"small\xffhead"), "not UTF-8"),
    ("wrong-schema", GOOD.replace(b"mha-ci.codeobj/1", b"mha-ci.perf/1"), "schema is 'mha-ci.perf/1'"),
    ("a-list", b"[]", "schema is 'list'"),
    ("duplicate-top-key", GOOD[:-1] + b', "records": []}', "duplicate JSON key 'records'"),
    ("duplicate-record-key", stored_text(record() | {"spills": 0}).replace('"spills": 0', '"spills": 0, "spills": 3')
     .encode(), "duplicate JSON key 'spills'"),
    ("duplicate-variant", stored_text(record(), record()).encode(), "duplicate keys"),
    ("records-an-object", GOOD.replace(b'"records": [', b'"records": {"a": ').replace(b"]}", b"}}"),
     "records is"),
    ("record-a-string", stored_text("oops").encode(), "a record is 'oops' (str)"),  # type: ignore[arg-type]
    ("shared-a-string", stored_text(record(shared_bytes="16384")).encode(),
     "shared_bytes is '16384' (str), expected a non-negative integer"),
    ("registers-negative", stored_text(record(registers=-1)).encode(), "registers is -1"),
    ("spills-a-bool", stored_text(record(spills=True)).encode(), "spills is True (bool)"),
    ("sha-empty", stored_text(record(sha256="")).encode(), "sha256 is '' (str), expected a non-empty string"),
    ("config-a-list", stored_text(record(config=[1])).encode(), "config is [1] (list), expected an object"),
    ("field-missing", stored_text({k: v for k, v in record().items() if k != "registers"}).encode(),
     "lacks ['registers']"),
    ("field-unknown", stored_text(record() | {"shared_byte": 1}).encode(),
     "unknown field 'shared_byte' (did you mean 'shared_bytes'?)"),
    ("key-unknown", GOOD[:-1] + b', "recrods": []}', "unknown top-level key 'recrods'"),
    ("nested-deep", _nested(100_000), "not JSON: RecursionError"),
    ("integer-huge", stored_text(record()).replace('"spills": 0', '"spills": ' + "9" * 5000).encode(),
     "not JSON: ValueError"),
]


@pytest.mark.parametrize("action", ["verify", "update", "compute"])
@pytest.mark.parametrize("raw,phrase", [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT])
def test_corrupt_stored_records_are_exit_2_naming_the_file_before_any_compile(checkout, capsys, action, raw, phrase):
    root, state = checkout
    (root / STORED).write_bytes(raw)
    assert checksums(root, action) == 2
    err = capsys.readouterr().err
    assert f"{root / STORED}: stored checksums unreadable: " in err and phrase in err, err
    assert state["payload"].runs == [], "the payload (the compile) ran before the stored file was checked"
    assert (root / STORED).read_bytes() == raw                 # update left it as it was


def test_every_toolchain_stored_file_is_checked_before_the_first_compile(checkout, capsys):
    root, state = checkout
    broken = root / STORED.with_name("triton-3.4.json")
    broken.write_text("{")
    assert main(["--root", str(root), "checksums", "verify", "--toolchain", "triton-3.8,triton-3.4", "--arch",
                 "sm90", "--out", str(root / "out")]) == 2
    assert f"{broken}: stored checksums unreadable" in capsys.readouterr().err
    assert state["payload"].runs == [], "triton-3.8 compiled before triton-3.4's stored file was checked"


def test_stored_records_that_are_a_folder_are_exit_2(checkout, capsys):
    root, state = checkout
    (root / STORED).unlink()
    (root / STORED).mkdir()
    assert checksums(root, "verify") == 2
    assert "not a regular file" in capsys.readouterr().err and state["payload"].runs == []


def test_every_stored_file_of_the_checkout_passes_the_checks(repo_root):
    for path in sorted((repo_root / STORED.parent).glob("*.json")):
        assert records.load(path).records, path


def test_unreadable_payload_result_is_a_failed_gate_not_a_crash(checkout, capsys):
    root, state = checkout
    state["payload"] = Payload(b'{"schema": "mha-ci.codeobj/1", "records": [')
    assert checksums(root, "verify") == 1
    assert "wrote an unreadable record file" in capsys.readouterr().err


# --only --------------------------------------------------------------------------------------

def test_only_matching_no_variant_is_exit_2_with_the_closest_keys(checkout, capsys):
    """The payload enumerates every variant, finds none with the substring and exits 2 with a
    file that names the closest keys (what payloads/checksums.py `_no_match` writes)."""
    root, state = checkout
    closest = [KEY, "sm90/forward/small_head/fwd/fp16-d64-causal"]
    state["payload"] = Payload(CodeObjectFile(TOOLCHAIN, (), None, (), {"variants": 0, "closest": closest}),
                               exit_code=2)
    assert checksums(root, "verify", "--only", "fp16-d64-plian") == 2
    err = capsys.readouterr().err
    assert "no variant matches --only 'fp16-d64-plian'" in err and f"closest keys: {KEY}, " in err, err
    assert "--only" in state["payload"].runs[0].args


def test_only_passes_through_when_it_matches(checkout):
    root, state = checkout
    assert checksums(root, "verify", "--only", "fp16-d64") == 0
    args = state["payload"].runs[0].args
    assert args[args.index("--only") + 1] == "fp16-d64"


def test_recheck_and_seed_go_to_the_payload_and_a_share_outside_0_1_is_exit_2(checkout, capsys):
    root, state = checkout
    assert checksums(root, "verify", "--recheck", "0.25", "--seed", "11") == 0
    args = state["payload"].runs[0].args
    assert args[args.index("--recheck") + 1] == "0.25" and args[args.index("--seed") + 1] == "11"
    assert args[args.index("--stored") + 1] == str(STORED)
    for bad in ("2", "-0.1", "some"):
        with pytest.raises(SystemExit) as info:
            checksums(root, "verify", "--recheck", bad)
        assert info.value.code == 2 and "is not a share between 0 and 1" in capsys.readouterr().err


def test_variant_closest_keys_prefer_the_segment_that_is_nearly_typed():
    from mha_ci.checksums.variants import closest_keys

    keys = ["gfx942/forward/default/fwd/fp16-d128-causal", KEY, "sm90/backward/small_head/bwd_dq/bf16-d48-causal"]
    assert closest_keys("fp16-d64-plian", keys, 1) == [KEY]
    assert closest_keys("sm90/forwrd", keys, 1) == [KEY]


# shared memory refused before code generation ---------------------------------------------------

def refused_run(value: int = 557056) -> CodeObjectFile:
    return CodeObjectFile(TOOLCHAIN, (), None, (), {"variants": 1},
                          ({"key": KEY, "arch": "sm90", "value": value, "limit": 232448},))


def test_shared_limits_go_to_the_payload(checkout):
    root, state = checkout
    checksums(root, "verify")
    args = state["payload"].runs[0].args
    assert args[args.index("--shared-limit") + 1] == "sm90=232448"


def test_refused_variant_fails_verify_as_over_the_limit_not_as_removed(checkout, capsys):
    root, state = checkout
    state["payload"] = Payload(refused_run())
    assert checksums(root, "verify") == 1
    verdict = json.loads((root / "out" / "code_objects" / "triton-3.8.verify.json").read_text())
    assert [(b["key"], b["figure"], b["value"], b["limit"]) for b in verdict["over_limits"]] == \
        [(KEY, "shared memory", 557056, 232448)]
    assert verdict["differences"] == []              # not "removed": it has no code object to compare
    assert f"OVER LIMIT {KEY}: shared memory 557056 bytes per block exceeds the sm90 limit of 232448" \
        in capsys.readouterr().out


@pytest.mark.parametrize("action", ["compute", "update"])
def test_refused_variant_fails_compute_and_is_never_stored(checkout, capsys, action):
    root, state = checkout
    before = (root / STORED).read_bytes()
    state["payload"] = Payload(refused_run())
    assert checksums(root, action) == 1
    assert "shared memory 557056" in capsys.readouterr().err
    assert (root / STORED).read_bytes() == before


def test_shared_memory_gate_stops_before_the_stage_after_the_allocation():
    """The gate on a stand-in backend whose stage table looks like Triton's (the llir stage
    sets metadata["shared"]); `triton.compile` runs the table in order, as here."""
    from mha_ci.checksums.compile import SharedMemoryOverLimit, shared_memory_gate

    ran: list[str] = []

    class Backend:
        def add_stages(self, stages, options, language):
            for ext in ("ttir", "ttgir", "llir", "ptx", "cubin"):
                stages[ext] = lambda module, metadata, ext=ext: (ran.append(ext), metadata.update(
                    shared=options["shared"]) if ext == "llir" else None)

    def compile_like_triton(shared: int) -> None:
        stages: dict = {}
        Backend().add_stages(stages, {"shared": shared}, "triton")
        metadata: dict = {}
        for stage in stages.values():
            stage(None, metadata)

    with shared_memory_gate(Backend, 232448):
        with pytest.raises(SharedMemoryOverLimit, match="shared memory 557056 bytes > limit 232448"):
            compile_like_triton(557056)
        assert ran == ["ttir", "ttgir", "llir"]      # ptxas (the ptx -> cubin stage) never started
        ran.clear()
        compile_like_triton(232448)                   # at the limit: compiles to the end
        assert ran == ["ttir", "ttgir", "llir", "ptx", "cubin"]
    assert "add_stages" in vars(Backend) and vars(Backend)["add_stages"].__qualname__.startswith("test_")
    ran.clear()
    compile_like_triton(557056)                       # outside the gate: Triton as it is
    assert ran[-1] == "cubin"


def test_tune_asks_the_compile_to_stop_at_the_arch_shared_limit(pipeline_root, tmp_path):
    from mha_ci.model.loader import load_pipeline
    from mha_ci.checksums.candidates import compile_candidates

    pipeline = load_pipeline(pipeline_root)

    class Executor:
        name = "venv"

        def run(self, payload):
            (payload.out_dir / "compile" / "results.json").write_text('{"results": {}}')
            return PayloadResult(exit_code=0)

    compile_candidates(pipeline_root, pipeline.toolchains["triton-3.8"], pipeline.archs["sm90"], pipeline, [],
                       Executor(), tmp_path, jobs=1)
    request = json.loads((tmp_path / "compile" / "request.json").read_text())
    assert request["shared_limits"] == {"sm90": 232448}


def test_tune_prunes_a_refused_candidate_by_the_shared_rule_with_its_reason():
    from types import SimpleNamespace

    from mha_ci.tune import prune, space

    cands = [space.Candidate("current", (("BLOCK_M", 128),)), space.Candidate("m256", (("BLOCK_M", 256),))]
    decisions = [prune.Decision(c) for c in cands]
    ok = {"fwd": {"shared_bytes": 1000, "registers": 100, "spills": 0, "error": None}}
    refused = {"fwd": {"shared_bytes": 557056, "registers": 0, "spills": 0, "error": None, "sha256": "",
                       "refused": "shared memory 557056 bytes > limit 232448 (arch sm90)"}}
    prune.by_resources(decisions, {"current": {"kernels": ok}, "m256": {"kernels": refused}},
                       SimpleNamespace(shared_bytes=232448, registers=255))
    assert (decisions[1].rule, decisions[1].why) == ("shared", "fwd: shared memory 557056 bytes > limit 232448 "
                                                               "(arch sm90)")
