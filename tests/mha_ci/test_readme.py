"""The README is a how-to: it opens with the two commands CI runs, links every doc it names (the
CI guide is linked, not copied), and carries no dated timings, which live in docs/."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def test_readme_opens_with_the_two_commands():
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in block.strip().splitlines()] == [["make", "ci"], ["make", "test"]]


def test_ci_script_calls_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_link_in_the_readme_exists():
    targets = [t for t in LINK.findall(README) if not re.match(r"[a-z]+:", t)]
    assert targets, "the README links no docs"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links files a clone does not have: {missing}"


def test_readme_links_every_guide_in_docs():
    guides = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    linked = set(LINK.findall(README))
    assert not guides - linked, f"guides the README does not list: {sorted(guides - linked)}"
    assert "docs/records/README.md" in linked, "the README does not point at the records"


def test_ci_guide_is_linked_not_copied():
    assert "](docs/ci-guide.md)" in README
    guide_headings = set(re.findall(r"^#{2,3} .+$", (ROOT / "docs" / "ci-guide.md").read_text(), re.M))
    copied = guide_headings & set(re.findall(r"^#{2,3} .+$", README, re.M))
    assert not copied and "ci-guide:start" not in README, f"the README copies the CI guide: {sorted(copied)}"


def test_readme_is_short_and_undated():
    assert len(README.splitlines()) <= 120, "the README is a how-to: details go in docs/"
    prose = re.sub(r"records/[\w.-]+", "records/", README)     # a record's folder name carries its date
    dates = re.findall(r"\b20\d\d-\d\d-\d\d\b", prose)
    timings = re.findall(r"\b\d+ (?:min|s)\b", README)
    assert not dates and not timings, f"dated timings belong in docs/ci-timings.md: {dates + timings}"
