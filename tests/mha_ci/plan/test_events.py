"""Reading events (GitHub payloads, changed-files lists, labels) and matching path patterns."""
from __future__ import annotations

from pathlib import Path

import pytest

from mha_ci.errors import ConfigError
from mha_ci.plan.events import build_event, event_kind, read_changed_files, read_github_event
from mha_ci.plan.paths import path_matches

EVENTS = Path(__file__).resolve().parents[2] / "fixtures" / "events"


def test_pull_request_payload():
    event = read_github_event(EVENTS / "pull_request_labeled_sm90.json")
    assert event.kind == "pull_request"
    assert event.labels == frozenset({"ci:sm90", "enhancement"})
    assert event.branch == "main" and event.draft is False
    assert event.changed_files is None          # not in GitHub's payload: unknown


def test_draft_pull_request_payload():
    assert read_github_event(EVENTS / "pull_request_opened_draft.json").draft is True


@pytest.mark.parametrize("name, kind, branch", [
    ("push_main.json", "push", "main"),
    ("push_feature_branch.json", "push", "experiment"),
    ("schedule.json", "schedule", None),
    ("workflow_dispatch.json", "manual", "main"),
])
def test_kind_read_off_the_payload(name, kind, branch):
    event = read_github_event(EVENTS / name)
    assert (event.kind, event.branch) == (kind, branch)


def test_workflow_dispatch_labels_come_from_inputs():
    event = read_github_event(EVENTS / "workflow_dispatch_labels.json")
    assert event.labels == frozenset({"ci:gfx942", "ci:perf"})


def test_tag_push_keeps_the_full_ref(tmp_path):
    payload = tmp_path / "tag.json"
    payload.write_text('{"ref": "refs/tags/v1.0", "before": "0", "commits": []}')
    assert read_github_event(payload).branch == "refs/tags/v1.0"


def test_unrecognisable_payload_asks_for_the_kind(tmp_path):
    payload = tmp_path / "odd.json"
    payload.write_text('{"zen": "Keep it logically awesome."}')
    with pytest.raises(ConfigError, match="pass --event KIND"):
        read_github_event(payload)
    assert read_github_event(payload, "schedule").kind == "schedule"


def test_event_kind_aliases_and_typos():
    assert event_kind("workflow_dispatch") == "manual"
    assert event_kind("push") == "push"
    with pytest.raises(ConfigError) as info:
        event_kind("schedul")
    assert info.value.suggestion == "schedule"


def test_changed_files_list(tmp_path):
    listing = tmp_path / "changed.txt"
    listing.write_text("./src/mha/a.py\n\n  docs/x.md  \nsrc/mha/a.py\n")
    assert read_changed_files(listing) == ("src/mha/a.py", "docs/x.md")


def test_build_event_merges_labels_and_files(tmp_path):
    listing = tmp_path / "changed.txt"
    listing.write_text("README.md\n")
    event = build_event(github_event=EVENTS / "pull_request_labeled_sm90.json",
                        changed_files=listing, labels="ci:perf, ci:gfx942")
    assert event.labels == frozenset({"ci:sm90", "enhancement", "ci:perf", "ci:gfx942"})
    assert event.changed_files == ("README.md",)
    assert build_event().kind == "pull_request" and build_event().changed_files is None


@pytest.mark.parametrize("path, pattern, expected", [
    ("README.md", "**/*.md", True),
    ("docs/a/b.md", "**/*.md", True),
    ("src/mha/README.md", "**/*.md", True),
    ("README.mdx", "**/*.md", False),
    ("docs/guide/index.html", "docs/**", True),
    ("mydocs/x", "docs/**", False),
    ("src/mha/configs/sm90-MHA-DEFAULT.json", "src/mha/configs/sm90-*", True),
    ("src/mha/configs/old/sm90-MHA-DEFAULT.json", "src/mha/configs/sm90-*", False),
    ("src/mha/configs/gfx950-MHA-DEFAULT.json", "src/mha/configs/gfx95-*", False),
    ("src/mha/kernels/fwd.py", "src/mha/**", True),
    ("src/mha_ci/cli.py", "src/mha/**", False),
    ("containers/triton-3.8/requirements.lock", "containers/*/requirements.lock", True),
])
def test_path_patterns(path, pattern, expected):
    assert path_matches(path, pattern) is expected
