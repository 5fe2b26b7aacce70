"""Fixtures of the tune tests: a throwaway git checkout for `tune propose`."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def tune_repo(tmp_path: Path) -> Path:
    """A one-commit checkout on `main` holding the sm90 config file and the pipeline (perf.yaml
    holds the gate; the lock files make it load): what `propose` reads and branches from (its
    code-object records are faked by the tests)."""
    repo = tmp_path / "repo"
    for rel in ("pipelines", "src/mha/configs", "perf_baselines/code_objects"):
        (repo / rel).mkdir(parents=True)
    locks = [p.relative_to(ROOT) for p in ROOT.glob("containers/*/requirements*.lock")]
    yamls = [p.relative_to(ROOT) for p in ROOT.glob("pipelines/*.yaml")]
    for rel in [*yamls, *locks, "src/mha/configs/sm90-MHA-DEFAULT.json"]:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text((ROOT / rel).read_text())
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return repo
