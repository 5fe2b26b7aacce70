"""A Triton cache folder that mha-ci makes for a compile is gone once the process that made it
exits, whichever way it exits; a folder the caller names is left alone."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import os, sys
from mha_ci.checksums.compile import prepare_environment
prepare_environment([], {named!r})
print(os.environ["TRITON_CACHE_DIR"], flush=True)
open(os.path.join(os.environ["TRITON_CACHE_DIR"], "kernel.cubin"), "w").write("x")
{ending}
"""


def _run(ending: str, named: str | None = None) -> tuple[Path, int]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(named=named, ending=ending)],
                          capture_output=True, text=True, timeout=60)
    return Path(proc.stdout.split()[0]), proc.returncode


@pytest.mark.parametrize("ending, code", [("", 0), ("sys.exit(3)", 3), ("raise RuntimeError('boom')", 1)])
def test_a_made_cache_is_removed_on_every_exit(ending, code):
    cache, rc = _run(ending)
    assert rc == code
    assert cache.name.startswith("mha-ci-triton-cache-")
    assert not cache.exists()


def test_a_named_cache_is_kept(tmp_path):
    named = tmp_path / "triton-cache"
    named.mkdir()
    cache, rc = _run("", str(named))
    assert rc == 0 and cache == named
    assert (named / "kernel.cubin").is_file()
