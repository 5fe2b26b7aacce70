"""The tree keeps the shape docs/architecture.md describes: perf_baselines/ holds only what the
gates read, the architecture picture names the runner's folders as they are, and every docs/
file the code and tests refer to exists in a clone."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tracked(*paths: str) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", *paths], cwd=ROOT, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return out.stdout.splitlines()


def test_perf_baselines_holds_data_only():
    files = tracked("perf_baselines")
    assert files, "perf_baselines/ is empty"
    code = [f for f in files if f.endswith((".py", ".sh"))]
    assert not code, f"scripts in a data folder (they belong under docs/ or src/): {code}"
    allowed = re.compile(r"perf_baselines/([a-z0-9]+/[^/]+\.json|code_objects/[^/]+\.json|"
                         r"test_durations/[^/]+\.json|[a-z_]+/README\.md)$")
    stray = [f for f in files if not allowed.match(f)]
    assert not stray, f"perf_baselines/ holds <arch>/<toolchain>.json, code_objects/, test_durations/ only: {stray}"


def test_architecture_names_every_runner_folder():
    text = (ROOT / "docs" / "architecture.md").read_text()
    layout = text.split("## Layout", 1)[1].split("```", 2)[1]
    runner = layout.split("\nsrc/mha_ci/", 1)[1].split("\ntests/", 1)[0]
    documented = set(re.findall(r"^  ([a-z_]+)/ ", runner, re.M))
    folders = {p.name for p in (ROOT / "src" / "mha_ci").iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert documented == folders, (f"docs/architecture.md's layout is out of date: missing {sorted(folders - documented)}, "
                                   f"gone {sorted(documented - folders)}")


DOC_REF = re.compile(r"\bdocs/[A-Za-z0-9_./-]*[A-Za-z0-9_/-]")
# Paths the plan tests and path rules use as examples of documentation changes, not references.
EXAMPLES = {"docs/a/b.md", "docs/x.md", "docs/notes.md", "docs/guide/index.html"}


def test_every_docs_path_the_code_names_exists():
    files = [f for f in tracked("src", "tests", "pipelines", "Makefile", ".ci")
             if f.endswith((".py", ".yaml", ".sh", ".json")) or f in ("Makefile",)]
    missing = set()
    for f in files:
        for ref in DOC_REF.findall((ROOT / f).read_text(errors="replace")):
            if ref not in EXAMPLES and ".." not in ref and not (ROOT / ref).exists():
                missing.add(f"{f}: {ref}")
    assert not missing, f"references to docs/ files a clone does not have: {sorted(missing)}"
