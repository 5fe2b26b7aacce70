"""The tree keeps the shape docs/architecture.md describes: perf_baselines/ holds only what the
gates read, the architecture picture names the runner's folders as they are, and every docs/
file the code and tests refer to exists in a clone."""
import re
import subprocess
import tomllib
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
    allowed = re.compile(r"perf_baselines/([a-z0-9]+/[^/]+\.json|[a-z0-9]+/accuracy/[^/]+\.json|code_objects/[^/]+\.json|"
                         r"test_durations/[^/]+\.json|[a-z_]+/README\.md)$")
    stray = [f for f in files if not allowed.match(f)]
    assert not stray, f"perf_baselines/ holds <arch>/<toolchain>.json, <arch>/accuracy/, code_objects/, test_durations/ only: {stray}"


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
EXAMPLES = {"docs/a/b.md", "docs/x.md", "docs/notes.md", "docs/guide/index.html",
            "docs/guide.md", "docs/new.md"}      # the docs job's tests write these in a checkout of their own


def test_every_docs_path_the_code_names_exists():
    files = [f for f in tracked("src", "tests", "pipelines", "Makefile", ".ci")
             if f.endswith((".py", ".yaml", ".sh", ".json")) or f in ("Makefile",)]
    missing = set()
    for f in files:
        for ref in DOC_REF.findall((ROOT / f).read_text(errors="replace")):
            if ref not in EXAMPLES and ".." not in ref and not (ROOT / ref).exists():
                missing.add(f"{f}: {ref}")
    assert not missing, f"references to docs/ files a clone does not have: {sorted(missing)}"


RECORDS = "docs/records"
COMMAND = re.compile(r"\bmha-ci [a-z]|\bpython3? -m |\bbash [\w./$-]+\.sh")


def record_folders() -> list[str]:
    return sorted({f.split("/")[2] for f in tracked(RECORDS) if f.count("/") >= 3})


def test_records_live_in_one_folder():
    assert record_folders(), f"{RECORDS}/ holds no record"
    for old in ("gpu-runs", "perf-study"):   # the records' former homes beside the guides
        assert not tracked(f"docs/{old}"), f"docs/{old}/ is a record: it belongs under {RECORDS}/<date>-<what>/"


def test_each_record_has_a_readme_naming_its_commands():
    for folder in record_folders():
        assert re.match(r"\d{4}-\d\d-\d\d-[a-z0-9-]+$", folder), f"{RECORDS}/{folder}: name it <date>-<what>"
        readme = ROOT / RECORDS / folder / "README.md"
        assert readme.is_file(), f"{RECORDS}/{folder} has no README.md saying what made it"
        assert COMMAND.search(readme.read_text()), f"{readme.relative_to(ROOT)} names no command that made it"
    index = (ROOT / RECORDS / "README.md").read_text()
    unlisted = [f for f in record_folders() if f"]({f}/README.md)" not in index]
    assert not unlisted, f"{RECORDS}/README.md lists no line for {unlisted}"


IMPORT = re.compile(r"^\s*(?:from|import)\s+([\w.]+)", re.M)


def test_records_are_never_imported():
    record_modules = {Path(f).stem for f in tracked(RECORDS) if f.endswith(".py")}
    bad = []
    for f in tracked("src", "tests"):
        if not f.endswith(".py") or ROOT / f == Path(__file__):   # this file names what it looks for
            continue
        text = (ROOT / f).read_text(errors="replace")
        names = {part for name in IMPORT.findall(text) for part in name.split(".")}
        loads_by_path = "docs/records" in text and ("sys.path" in text or "spec_from_file_location" in text)
        if names & (record_modules | {"docs"}) or loads_by_path:
            bad.append(f)
    assert not bad, f"code imports a record's script (records are read by people, not run): {bad}"


RECORD_PATH = re.compile(r"""(?:/|Path\()\s*["']docs/records|["']docs/records/\{""")


def test_code_neither_reads_nor_writes_records():
    """Tests read copies under tests/fixtures/; tune leaves its report under --out. A record is
    made by hand (docs/records/README.md), so a path into docs/records/ is only ever prose."""
    bad = [f for f in tracked("src", "tests") if f.endswith(".py") and ROOT / f != Path(__file__)
           and RECORD_PATH.search((ROOT / f).read_text(errors="replace"))]
    assert not bad, f"code that builds a path into {RECORDS}/: {bad}"


def test_pytest_never_collects_from_records():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert config.get("testpaths") == ["tests"], "pytest must collect from tests/ only, never from docs/records/"
    stray = [f for f in tracked(RECORDS) if re.search(r"(^|/)(test_[^/]*|[^/]*_test)\.py$|/conftest\.py$", f)]
    assert not stray, f"test files under {RECORDS}/ (a bare `pytest docs` would run them): {stray}"
