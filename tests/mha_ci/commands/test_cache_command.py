"""`mha-ci cache info` and `mha-ci cache prune` on a cache made here (no toolchain is built): what
they list, what prune removes by age and by size, and that an entry a running build or payload
holds is never removed."""
from __future__ import annotations

import fcntl
import io
import os
import time
from pathlib import Path

import pytest

from mha_ci.checksums.cache import IN_USE, CompileCache
from mha_ci.cli import build_parser, main
from mha_ci.executors import venv as venv_mod
from mha_ci.executors.venv import VenvExecutor

DAY = 86400
ENTRY = {"sha256": "a" * 64, "shared_bytes": 1, "registers": 1, "spills": 0, "extra": {}, "seconds": 1.0,
         "error": None, "refused": None}


def _age(path: Path, days: float) -> None:
    stamp = time.time() - days * DAY
    os.utime(path, (stamp, stamp))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """Two environments (one last used 40 days ago, 2 MB; one today, 1 MB), one compile cache with
    an old and a fresh result, one image context."""
    root = tmp_path / "cache"
    monkeypatch.setenv("MHA_CI_CACHE", str(root))
    monkeypatch.setenv("MHA_CI_STATE", str(tmp_path / "state"))
    for name, days, size in (("triton-3.4-aaaaaaaaaaaa", 40, 2_000_000), ("triton-3.8-bbbbbbbbbbbb", 0, 1_000_000)):
        env = root / "venvs" / name
        (env / "lib").mkdir(parents=True)
        (env / "lib" / "blob").write_bytes(b"\0" * size)
        (root / "venvs" / f"{name}.install.log").write_text("log\n")
        lock = root / "venvs" / f".{name}.lock"
        lock.touch()
        _age(lock, days)
    compiled = CompileCache(root / "checksums" / "triton-3.8")
    for key, days in (("aa" + "1" * 62, 50), ("bb" + "2" * 62, 1)):
        compiled.put(key, ENTRY)
        _age(root / "checksums" / "triton-3.8" / key[:2] / f"{key}.json", days)
    context = root / "contexts" / "triton-3.8-cpu"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text("FROM x\n")
    return root


def _run(tmp_path, capsys, *args: str) -> tuple[int, str]:
    code = main(["--root", str(tmp_path), "cache", *args])
    return code, capsys.readouterr().out


def test_every_option_has_help():
    parser = build_parser()
    cache = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "cache")[1]
    for name, sub in cache._subparsers._group_actions[0].choices.items():
        for action in sub._actions:
            assert action.help, f"mha-ci cache {name} {action.option_strings}: no help text"


def test_info_lists_root_state_and_each_entry(tmp_path, cache, capsys):
    code, out = _run(tmp_path, capsys, "info")
    assert code == 0
    assert f"cache: {cache.resolve()}\n" in out and f"state: {(tmp_path / 'state').resolve()}\n" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "2.0 MB" in lines["venvs/triton-3.4-aaaaaaaaaaaa"] and "(40 days ago)" in lines["venvs/triton-3.4-aaaaaaaaaaaa"]
    assert "1.0 MB" in lines["venvs/triton-3.8-bbbbbbbbbbbb"] and "(today)" in lines["venvs/triton-3.8-bbbbbbbbbbbb"]
    assert "(2 compile results)" in lines["checksums/triton-3.8"] and "(1 days ago)" in lines["checksums/triton-3.8"]
    assert "contexts/triton-3.8-cpu" in lines
    assert "in 5 entries" in out


def test_info_of_a_cache_not_made_yet(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MHA_CI_CACHE", str(tmp_path / "none"))
    code, out = _run(tmp_path, capsys, "info")
    assert code == 0 and "(not created yet)" in out and "0 B in 0 entries" in out


def test_prune_removes_what_was_not_used_for_the_days_given(tmp_path, cache, capsys):
    code, out = _run(tmp_path, capsys, "prune", "--older-than", "30")
    assert code == 0, out
    assert "removed venvs/triton-3.4-aaaaaaaaaaaa (2.0 MB" in out
    assert f"removed checksums/triton-3.8/aa{'1' * 62}" in out
    assert "removed 2 entries" in out and "unused for more than 30 days" in out
    assert sorted(p.name for p in (cache / "venvs").iterdir() if not p.name.startswith(".")) == [
        "triton-3.8-bbbbbbbbbbbb", "triton-3.8-bbbbbbbbbbbb.install.log"]
    assert [p.name for p in (cache / "checksums" / "triton-3.8").rglob("*.json")] == [f"bb{'2' * 62}.json"]
    assert not [p for p in (cache / "venvs").iterdir() if ".building-" in p.name]     # nothing set aside left
    assert (cache / "contexts" / "triton-3.8-cpu").is_dir()


def test_prune_by_size_removes_the_least_recently_used_first(tmp_path, cache, capsys):
    code, out = _run(tmp_path, capsys, "prune", "--max-size", "0.0015")
    assert code == 0, out
    removed = [line.split()[1] for line in out.splitlines() if line.startswith("removed ")]
    # oldest first: the 50-day compile result, then the 40-day environment; 1.0 MB then fits
    assert removed == [f"checksums/triton-3.8/aa{'1' * 62}", "venvs/triton-3.4-aaaaaaaaaaaa"]
    assert (cache / "venvs" / "triton-3.8-bbbbbbbbbbbb").is_dir()


def test_dry_run_removes_nothing(tmp_path, cache, capsys):
    code, out = _run(tmp_path, capsys, "prune", "--older-than", "0", "--dry-run")
    assert code == 0 and "would remove 5 entries" in out
    assert (cache / "venvs" / "triton-3.4-aaaaaaaaaaaa").is_dir()


def test_prune_never_removes_what_a_running_build_or_payload_holds(tmp_path, cache, capsys):
    with open(cache / "venvs" / ".triton-3.4-aaaaaaaaaaaa.lock", "a") as venv_lock, \
            open(cache / "checksums" / "triton-3.8" / IN_USE, "a") as compile_lock:
        fcntl.flock(venv_lock, fcntl.LOCK_SH)          # a payload running in the environment
        fcntl.flock(compile_lock, fcntl.LOCK_SH)       # a checksums run using the compile cache
        code, out = _run(tmp_path, capsys, "prune", "--older-than", "0")
    assert code == 0, out
    assert "kept venvs/triton-3.4-aaaaaaaaaaaa: in use" in out
    assert out.count("kept checksums/triton-3.8/") == 2
    assert (cache / "venvs" / "triton-3.4-aaaaaaaaaaaa").is_dir()
    assert len(list((cache / "checksums" / "triton-3.8").rglob("*.json"))) == 2
    assert not (cache / "venvs" / "triton-3.8-bbbbbbbbbbbb").exists()     # free: removed


def test_negative_figures_are_usage_errors(tmp_path, cache, capsys):
    assert main(["--root", str(tmp_path), "cache", "prune", "--older-than", "-1"]) == 2
    assert main(["--root", str(tmp_path), "cache", "prune", "--max-size", "-1"]) == 2


def test_a_payload_runs_with_its_environment_held_and_marked_used(tmp_path, monkeypatch):
    """The venv executor holds the environment's lock shared for the payload's whole run (so prune
    cannot take it), and builds it again when it vanished between its check and its use."""
    executor = VenvExecutor(tmp_path, cache=tmp_path / "cache", stream=io.StringIO())
    env = tmp_path / "cache" / "venvs" / "tiny-000000000000"
    env.mkdir(parents=True)
    checks = iter([False, True])       # pruned right after ensure_env, then built again
    ensured: list[Path] = []
    monkeypatch.setattr(executor, "ensure_env", lambda toolchain: ensured.append(env) or env)
    monkeypatch.setattr(executor, "_complete", lambda target: next(checks))
    seen: dict = {}

    def payload_runs(python, payload, root, **kwargs):
        with open(env.parent / f".{env.name}.lock", "a") as prune_lock:
            try:
                fcntl.flock(prune_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen["held"] = False
            except BlockingIOError:
                seen["held"] = True
        return "result"

    monkeypatch.setattr(venv_mod, "run_python_payload", payload_runs)

    class Payload:
        toolchain, env = None, {}

    monkeypatch.setattr(venv_mod.dataclasses, "replace", lambda payload, **changes: payload)
    assert executor.run(Payload()) == "result"         # type: ignore[arg-type]
    assert seen == {"held": True} and len(ensured) == 2
    assert time.time() - (env.parent / f".{env.name}.lock").stat().st_mtime < 60


def test_state_inside_the_cache_is_shown_not_fatal(tmp_path, cache, monkeypatch, capsys):
    monkeypatch.setenv("MHA_CI_STATE", str(cache / "state"))
    code, out = _run(tmp_path, capsys, "info")
    assert code == 0 and "is inside the cache" in out
