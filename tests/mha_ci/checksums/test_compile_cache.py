"""The compile cache shared by clones and concurrent runs (issue 40), without compiling: keys
that name no checkout path, entries written whole under concurrency, a corrupt entry a miss,
and the folder lock that keeps `mha-ci cache prune` away from a running payload.
tests/mha_ci/checksums/test_compile.py shares one real compile cache between two clones.
"""
from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import shutil
from pathlib import Path

import pytest

from mha_ci.checksums.cache import IN_USE, CompileCache, cache_key
from mha_ci.files import tree_digest

ENTRY = {"sha256": "a" * 64, "shared_bytes": 1024, "registers": 40, "spills": 0, "extra": {"pad": "x" * 4000},
         "seconds": 1.0, "error": None, "refused": None}
KEY = "ab" + "0" * 62


def test_two_clones_of_the_kernel_package_make_the_same_keys(tmp_path):
    first = tmp_path / "clone-a" / "src" / "mha"
    (first / "kernels").mkdir(parents=True)
    (first / "__init__.py").write_text("")
    (first / "kernels" / "k.py").write_text("X = 1\n")
    second = Path(shutil.copytree(first, tmp_path / "elsewhere" / "clone-b" / "src" / "mha"))
    assert tree_digest(first) == tree_digest(second)
    toolchain = {"name": "triton-3.8", "lock": "l", "triton": "3.8.0", "env": {}}
    keys = [cache_key(sources=tree_digest(p), config="c", identity={"num_warps": 4}, toolchain=toolchain)
            for p in (first, second)]
    assert keys[0] == keys[1]
    (second / "kernels" / "k.py").write_text("X = 2\n")          # what the clone holds, not where it is
    assert tree_digest(first) != tree_digest(second)


def _writer(folder: str, rounds: int) -> None:
    cache = CompileCache(Path(folder))
    for _ in range(rounds):
        cache.put(KEY, ENTRY)


def _reader(folder: str, rounds: int, seen) -> None:
    cache = CompileCache(Path(folder))
    for _ in range(rounds):
        entry = cache.get(KEY)
        seen.append("none" if entry is None else ("whole" if entry == ENTRY else "torn"))


def test_concurrent_writers_of_one_entry_leave_one_whole_entry(tmp_path):
    """Four processes write the entry 200 times each while two read it: a reader sees no entry
    or the whole one, and one entry file remains, with no temporary file beside it."""
    context = multiprocessing.get_context("fork")
    with context.Manager() as manager:
        seen = manager.list()
        procs = [context.Process(target=_writer, args=(str(tmp_path), 200)) for _ in range(4)]
        procs += [context.Process(target=_reader, args=(str(tmp_path), 400, seen)) for _ in range(2)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
            assert proc.exitcode == 0
        assert "torn" not in list(seen) and "whole" in list(seen)
    files = sorted(p.name for p in (tmp_path / KEY[:2]).iterdir())
    assert files == [f"{KEY}.json"]
    assert json.loads((tmp_path / KEY[:2] / f"{KEY}.json").read_text()) == ENTRY


@pytest.mark.parametrize("text", ['{"sha256": "aaaa', "", "[]", '{"sha256": "", "error": null}',
                                  '{"sha256": "aa", "error": "ptxas died"}'])
def test_a_corrupt_or_failed_entry_is_a_miss_and_is_overwritten(tmp_path, text):
    cache = CompileCache(tmp_path)
    path = tmp_path / KEY[:2] / f"{KEY}.json"
    path.parent.mkdir()
    path.write_text(text)
    assert cache.get(KEY) is None and cache.misses == 1
    cache.put(KEY, ENTRY)
    assert cache.get(KEY) == ENTRY and cache.hits == 1


def test_a_hit_marks_the_entry_used(tmp_path):
    cache = CompileCache(tmp_path)
    cache.put(KEY, ENTRY)
    path = tmp_path / KEY[:2] / f"{KEY}.json"
    os.utime(path, (1_000_000, 1_000_000))
    assert cache.get(KEY) == ENTRY
    assert path.stat().st_mtime > 1_000_000


def test_a_run_holds_the_folder_shared_so_prune_cannot_take_it(tmp_path):
    first, second = CompileCache(tmp_path / "c"), CompileCache(tmp_path / "c")
    with first.in_use(), second.in_use():          # two runs at once: both get in
        with open(tmp_path / "c" / IN_USE, "a") as prune_lock, pytest.raises(BlockingIOError):
            fcntl.flock(prune_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(tmp_path / "c" / IN_USE, "a") as prune_lock:
        fcntl.flock(prune_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)      # free once they are done


def test_no_cache_folder_holds_nothing(tmp_path):
    with CompileCache(None).in_use():
        pass
    assert list(tmp_path.iterdir()) == []


def _kernels(root: Path) -> Path:
    """A kernel package shaped like src/mha: two passes sharing a common module, a host module
    that imports them, and an __init__ that imports the host API."""
    pkg = root / "mha"
    (pkg / "kernels").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .interface import attention\n")
    (pkg / "interface.py").write_text("from .kernels.forward import fwd\nfrom .kernels import backward\n")
    (pkg / "kernels" / "__init__.py").write_text("")
    (pkg / "kernels" / "common.py").write_text("LOG2E = 1.4426950408889634\n")
    (pkg / "kernels" / "forward.py").write_text("from .common import LOG2E\n\ndef fwd(): return LOG2E\n")
    (pkg / "kernels" / "backward.py").write_text("from .common import LOG2E\nfrom . import forward\n\ndef bwd(): pass\n")
    (pkg / "kernels" / "dropout.py").write_text("import mha.kernels.common\n\ndef keep(): pass\n")
    return pkg


def test_a_kernel_file_change_misses_only_the_variants_that_reach_it(tmp_path):
    """Issue 40: a change to one kernel file recompiles only the variants whose kernel lives in it
    or imports it; a change to a module both passes import, all of them; host code, none."""
    from mha_ci.checksums.cache import module_sources_digest as digest

    pkg = _kernels(tmp_path)
    mods = ["mha.kernels.forward", "mha.kernels.backward", "mha.kernels.dropout"]
    before = {m: digest(pkg, m) for m in mods}
    (pkg / "kernels" / "backward.py").write_text("from .common import LOG2E\nfrom . import forward\n\ndef bwd(): return 1\n")
    after = {m: digest(pkg, m) for m in mods}
    assert [m for m in mods if before[m] != after[m]] == ["mha.kernels.backward"]
    (pkg / "kernels" / "forward.py").write_text("from .common import LOG2E\n\ndef fwd(): return 2 * LOG2E\n")
    moved = {m: digest(pkg, m) for m in mods}
    assert [m for m in mods if after[m] != moved[m]] == ["mha.kernels.forward", "mha.kernels.backward"]
    (pkg / "kernels" / "common.py").write_text("LOG2E = 1.44\n")
    common = {m: digest(pkg, m) for m in mods}
    assert all(moved[m] != common[m] for m in mods)      # dropout imports it by absolute name
    (pkg / "interface.py").write_text("# host code only\n")
    assert {m: digest(pkg, m) for m in mods} == common
    # a module that cannot be read keys by the whole tree: never a false hit
    assert digest(pkg, "mha.kernels.missing") == tree_digest(pkg)
    (pkg / "kernels" / "dropout.py").write_text("def (\n")
    assert digest(pkg, "mha.kernels.dropout") == tree_digest(pkg)


def test_the_real_kernel_modules_reach_what_they_import(repo_root):
    from mha_ci.checksums import cache
    import ast

    pkg = repo_root / "src" / "mha"
    tree = ast.parse((pkg / "kernels" / "forward_ws.py").read_text())
    assert sorted(cache._package_imports(tree, "mha.kernels.forward_ws", False, "mha", pkg)) == [
        "mha.kernels.common", "mha.kernels.forward"]
    assert cache.module_sources_digest(pkg, "mha.kernels.forward") != cache.module_sources_digest(
        pkg, "mha.kernels.backward")
