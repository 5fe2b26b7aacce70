"""The README's CI guide is generated from pipelines/, and the committed copy is current."""
from __future__ import annotations

from mha_ci.cli import main as cli
from mha_ci.export import ci_guide
from mha_ci.export.approved_gpu import APPROVAL_COMMAND, GPU_CHECK
from mha_ci.model.loader import load_pipeline


def test_committed_guide_is_up_to_date(repo_root, capsys):
    assert cli(["--root", str(repo_root), "export", "ci-guide", "--check"]) == 0, capsys.readouterr().out


def test_guide_names_every_label_path_rule_arch_and_event(repo_root):
    pipeline = load_pipeline(repo_root)
    text = ci_guide.render(pipeline)
    for rule in pipeline.triggers.labels:
        assert f"`{rule.label}`" in text
    for rule in pipeline.triggers.paths:
        for pattern in rule.patterns:
            assert f"`{pattern}`" in text
    for arch in pipeline.archs.values():
        assert all(f"`{label}`" in text for label in arch.runner_labels)
    assert "### Every pull request" in text and "Every push to main" in text and "Nightly" in text


def test_guide_follows_a_pipeline_change(pipeline_root, capsys):
    triggers = pipeline_root / "pipelines/triggers.yaml"
    triggers.write_text(triggers.read_text().replace("ci:sm90:", "ci:hopper:"))
    assert cli(["--root", str(pipeline_root), "export", "readme"]) == 0
    assert "| `ci:hopper` | correctness on sm90; perf on sm90 |" in capsys.readouterr().out
    assert cli(["--root", str(pipeline_root), "export", "ci-guide", "--check"]) == 1    # no docs/ci-guide.md there


def test_guide_states_the_trust_model_and_the_settings_it_relies_on(repo_root):
    text = ci_guide.render(load_pipeline(repo_root))
    trust = text[text.index("### Trust"):text.index("### Labels")]
    for needed in ("`pr-gpu.yml`", "`pull_request_target`", f"`{APPROVAL_COMMAND} <sha>`", f"`{GPU_CHECK}`", "`issue_comment`", "write access",
                   "moved past", "check run", "*GitHub Actions* app",
                   "GitHub-hosted", "exit 2", "default branch", "read-only token", "no secrets",
                   "*selected workflows*", "--ephemeral", "require approval for all outside collaborators",
                   "Branch protection", "`mha-ci run --gate-from`", "judged by the base's",
                   "`ACTIONS_RUNTIME_TOKEN`", "no `container:`"):
        assert needed in trust, needed
