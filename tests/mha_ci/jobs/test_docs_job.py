"""The docs job: links of README.md and docs/ must resolve to files a clone has, and the CI guide
must be what pipelines/ generates. Each case in a git checkout of its own."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mha_ci.export import ci_guide
from mha_ci.jobs import docs
from mha_ci.jobs.context import JobContext
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Job

JOB = Job("docs", "interpreter", "")


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                   check=True, capture_output=True)


@pytest.fixture
def checkout(pipeline_root: Path) -> Path:
    """pipelines/ and containers/ of this repository, a current CI guide, a README and a guide
    that link each other, all committed."""
    guide = pipeline_root / ci_guide.GUIDE_PATH
    guide.parent.mkdir(parents=True)
    guide.write_text(ci_guide.render(load_pipeline(pipeline_root)))
    (pipeline_root / "README.md").write_text("See [the guide](docs/guide.md#setup) and [CI](docs/ci-guide.md).\n")
    (pipeline_root / "docs" / "guide.md").write_text(
        "# Setup\n\nBack to the [README](../README.md), [the pipelines](../pipelines/), "
        "[a heading](#setup), [the web](https://example.com/x.md).\n\n"
        "```sh\necho '[not a link](nowhere.md)'\n```\n\nIn code: `[x](nowhere.md)`.\n")
    (pipeline_root / ".gitignore").write_text("/out/\n/scratch.md\n")
    git(pipeline_root, "init", "-q", "-b", "main")
    git(pipeline_root, "add", "-A")
    git(pipeline_root, "commit", "-q", "-m", "base")
    return pipeline_root


def run(root: Path):
    return docs.run_job(JOB, JobContext(load_pipeline(root), None, root / "out"))   # type: ignore[arg-type]


def test_the_id_names_no_toolchain():
    assert JOB.id == "docs-interpreter"


def test_links_that_resolve_and_a_current_guide_pass(checkout):
    result = run(checkout)
    assert result.verdict == "pass" and result.exit_code == 0, result.message
    assert result.details == {"documents": 3, "broken": [], "guide_stale": False}
    assert (checkout / "out" / result.artifacts[0]).read_text().startswith("3 documents checked; 0 broken links")


def test_a_link_to_no_file_fails_naming_document_line_and_target(checkout):
    guide = checkout / "docs" / "guide.md"
    guide.write_text(guide.read_text() + "\nSee [perf](perf-methd.md).\n")
    result = run(checkout)
    assert result.verdict == "fail" and result.exit_code == 1
    assert result.details["broken"] == ["docs/guide.md:11: perf-methd.md: no such file"]


def test_a_link_to_a_file_only_this_checkout_has_fails(checkout):
    (checkout / "scratch.md").write_text("notes\n")          # git-ignored: a clone has no such file
    (checkout / "docs" / "new.md").write_text("untracked\n")
    (checkout / "README.md").write_text("[notes](scratch.md), [new](docs/new.md)\n")
    result = run(checkout)
    assert result.verdict == "fail"
    assert [b.split(": ", 2)[1] for b in result.details["broken"]] == ["scratch.md", "docs/new.md"]
    assert all("a clone does not have it" in b for b in result.details["broken"])


def test_a_link_out_of_the_repository_fails(checkout):
    (checkout / "README.md").write_text("[up](../elsewhere/file.md)\n")
    assert run(checkout).details["broken"] == ["README.md:1: ../elsewhere/file.md: points outside the repository"]


def test_a_hand_edited_ci_guide_fails(checkout):
    guide = checkout / ci_guide.GUIDE_PATH
    guide.write_text(guide.read_text().replace("Every pull request", "Most pull requests"))
    result = run(checkout)
    assert result.verdict == "fail" and result.details["guide_stale"]
    assert "mha-ci export ci-guide --write" in result.message


def test_without_git_the_files_on_disk_count(checkout):
    shutil.rmtree(checkout / ".git")
    assert run(checkout).verdict == "pass"


def test_this_repository_passes(repo_root, tmp_path):
    """The checked-in documentation itself: every link resolves in a clone, the guide is current."""
    result = docs.run_job(JOB, JobContext(load_pipeline(repo_root), None, tmp_path))   # type: ignore[arg-type]
    assert result.verdict == "pass", result.message
