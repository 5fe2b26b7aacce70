"""Changed paths from git (mha_ci.plan.local_changes) in real temporary repositories, and what
`mha-ci plan` / `mha-ci run` make of them: a narrowed plan when there is a change to compare,
every path changed whenever there is nothing to compare against."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.plan.local_changes import default_branch, local_changes


@pytest.fixture(autouse=True)
def hermetic_git(monkeypatch, tmp_path):
    """No user or system git configuration: the same results on every machine."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name, value in (("NAME", "t"), ("EMAIL", "t@example.invalid")):
        monkeypatch.setenv(f"GIT_AUTHOR_{name}", value)
        monkeypatch.setenv(f"GIT_COMMITTER_{name}", value)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def write(root: Path, rel: str, text: str = "x\n") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def commit_all(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def make_repo(root: Path, branch: str = "main") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", branch)
    write(root, "README.md")
    write(root, "src/mha/kernel.py")
    write(root, ".gitignore", "/out/\n")
    commit_all(root, "base")
    return root


def test_not_a_git_checkout_counts_every_path(tmp_path):
    changes = local_changes(tmp_path)
    assert changes.paths is None
    assert "not a git checkout" in changes.note and "every path" in changes.note


def test_no_default_branch_counts_every_path(tmp_path):
    repo = make_repo(tmp_path / "repo", branch="trunk")
    git(repo, "switch", "-q", "-c", "feature")
    write(repo, "notes/a.md")
    commit_all(repo, "docs")
    changes = local_changes(repo)
    assert changes.paths is None and "no default branch" in changes.note


def test_clean_default_branch_counts_every_path(tmp_path):
    """The fresh clone of main that CI's `make test` runs: nothing to compare, so everything runs."""
    origin = make_repo(tmp_path / "origin")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    changes = local_changes(clone)
    assert changes.paths is None
    assert "no change against origin/main" in changes.note and "every path" in changes.note


def test_new_branch_without_changes_counts_every_path(tmp_path):
    repo = make_repo(tmp_path / "repo")
    git(repo, "switch", "-q", "-c", "feature")
    assert local_changes(repo).paths is None


def test_unrelated_history_counts_every_path(tmp_path):
    repo = make_repo(tmp_path / "repo")
    git(repo, "switch", "-q", "--orphan", "other")
    write(repo, "notes/a.md")
    commit_all(repo, "unrelated")
    changes = local_changes(repo)
    assert changes.paths is None and "no merge base" in changes.note


def test_commits_staged_unstaged_and_untracked_all_count(tmp_path):
    repo = make_repo(tmp_path / "repo")
    git(repo, "switch", "-q", "-c", "feature")
    write(repo, "notes/committed.md")
    commit_all(repo, "docs")
    write(repo, "notes/staged.md")
    git(repo, "add", "notes/staged.md")
    write(repo, "src/mha/kernel.py", "edited\n")          # unstaged
    write(repo, "tests/untracked.py")
    write(repo, "out/ignored.txt")                        # .gitignore hides it
    write(repo, "notes/café.md")                           # non-ASCII names arrive unquoted
    changes = local_changes(repo)
    assert set(changes.paths) == {"notes/committed.md", "notes/staged.md", "src/mha/kernel.py",
                                  "tests/untracked.py", "notes/café.md"}
    assert changes.note.startswith(f"changed files: {len(changes.paths)} against main (merge base ")


def test_changes_on_the_default_branch_itself_count(tmp_path):
    """On main with an uncommitted edit there is something to compare: just that edit."""
    repo = make_repo(tmp_path / "repo")
    write(repo, "notes/a.md")
    assert local_changes(repo).paths == ("notes/a.md",)


def test_a_rename_counts_both_paths(tmp_path):
    repo = make_repo(tmp_path / "repo")
    git(repo, "switch", "-q", "-c", "feature")
    (repo / "notes").mkdir()
    git(repo, "mv", "src/mha/kernel.py", "notes/kernel.py")
    commit_all(repo, "move")
    assert set(local_changes(repo).paths) == {"src/mha/kernel.py", "notes/kernel.py"}


def test_commits_on_the_default_branch_after_the_fork_do_not_count(tmp_path):
    repo = make_repo(tmp_path / "repo")
    git(repo, "switch", "-q", "-c", "feature")
    write(repo, "notes/mine.md")
    commit_all(repo, "mine")
    git(repo, "switch", "-q", "main")
    write(repo, "src/mha/theirs.py")
    commit_all(repo, "theirs")
    git(repo, "switch", "-q", "feature")
    assert local_changes(repo).paths == ("notes/mine.md",)


def test_origin_head_names_the_default_branch(tmp_path):
    origin = make_repo(tmp_path / "origin", branch="trunk")
    git(origin, "branch", "main")                         # a `main` that is not the default
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    assert default_branch(clone) == "origin/trunk"


def test_without_origin_head_main_then_master(tmp_path):
    repo = make_repo(tmp_path / "repo", branch="master")
    assert default_branch(repo) == "master"
    git(repo, "branch", "main")
    assert default_branch(repo) == "main"


def test_paths_are_relative_to_a_root_below_the_top_level(tmp_path):
    repo = make_repo(tmp_path / "repo")
    write(repo, "project/src/mha/x.py")
    commit_all(repo, "project")
    git(repo, "switch", "-q", "-c", "feature")
    write(repo, "project/notes/a.md")
    write(repo, "elsewhere.md")
    commit_all(repo, "docs")
    write(repo, "project/notes/untracked.md")
    assert set(local_changes(repo / "project").paths) == {"notes/a.md", "notes/untracked.md"}


# -- through the command line -----------------------------------------------------------------

@pytest.fixture
def checkout(pipeline_root: Path) -> Path:
    """pipeline_root as a git checkout: main holds pipelines/ and containers/, HEAD is main."""
    write(pipeline_root, "src/mha/kernels/common.py")
    git(pipeline_root, "init", "-q", "-b", "main")
    commit_all(pipeline_root, "base")
    return pipeline_root


def plan_json(root: Path, capsys, *args: str) -> tuple[dict, str]:
    code = main(["--root", str(root), "plan", "--format", "json", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err


def kinds_archs(result: dict) -> set[tuple[str, str]]:
    return {(job["kind"], job["arch"]) for job in result["jobs"]}


def test_plan_on_clean_main_runs_the_full_pull_request_pipeline(checkout, capsys):
    result, err = plan_json(checkout, capsys)
    assert "every path counts as changed (no change against main" in err
    assert ("checksums", "interpreter") in kinds_archs(result)


def test_plan_of_a_docs_only_branch_keeps_only_the_docs_check(checkout, capsys):
    git(checkout, "switch", "-q", "-c", "docs-edit")
    write(checkout, "docs/x.md")
    commit_all(checkout, "docs")
    result, err = plan_json(checkout, capsys)
    assert kinds_archs(result) == {("docs", "interpreter")}
    assert "changed files: 1 against main" in err
    # --all: the same checkout, every path changed again
    everything, err = plan_json(checkout, capsys, "--all")
    assert ("checksums", "interpreter") in kinds_archs(everything) and "(--all)" in err


def test_plan_of_a_kernel_edit_adds_checksums_and_the_text_says_the_base(checkout, capsys):
    write(checkout, "src/mha/kernels/common.py", "# a comment\n")
    assert main(["--root", str(checkout), "plan"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("changed files: 1 against main (merge base ")
    assert "path src/mha/kernels/common.py" in out


def test_changed_files_and_all_exclude_each_other(checkout, tmp_path, capsys):
    listing = tmp_path / "changed.txt"
    listing.write_text("docs/notes.md\n")
    with pytest.raises(SystemExit) as exit_:
        main(["--root", str(checkout), "plan", "--all", "--changed-files", str(listing)])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_an_event_payload_without_a_list_does_not_read_git(checkout, capsys, repo_root):
    """CI's push and manual runs pass the payload alone: every path changed, whatever git says."""
    git(checkout, "switch", "-q", "-c", "docs-edit")
    write(checkout, "docs/x.md")
    commit_all(checkout, "docs")
    payload = repo_root / "tests" / "fixtures" / "events" / "pull_request_synchronize.json"
    result, err = plan_json(checkout, capsys, "--github-event", str(payload))
    assert ("checksums", "interpreter") in kinds_archs(result) and "changed files" not in err
