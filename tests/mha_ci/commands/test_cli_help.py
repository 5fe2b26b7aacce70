"""The command line explains itself: help for every option and positional, --version, and a
misspelt --arch or --toolchain answered (exit 2, with the known names) before anything looks
for a GPU or prints what it is about to do."""
import argparse

import pytest

from mha_ci import __version__, cli


def parsers(parser: argparse.ArgumentParser, path: str = "mha-ci"):
    """Every parser of the tree with its command path, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, f"{path} {name}")


def test_every_option_and_positional_has_help():
    missing = []
    for path, parser in parsers(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "no help text: " + ", ".join(missing)


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"mha-ci {__version__}"


@pytest.mark.parametrize("argv, wrong, suggestion", [
    (["perf", "measure", "--toolchain", "triton-3.5"], "toolchain 'triton-3.5'", "triton-3."),
    (["perf", "measure", "--arch", "sm91"], "arch 'sm91'", "sm90"),
    (["perf", "refresh", "--toolchain", "triton-3.5"], "toolchain 'triton-3.5'", "triton-3."),
    (["tune", "--arch", "sm91", "--toolchain", "triton-3.4", "--dry-run"], "arch 'sm91'", "sm90"),
    (["tune", "--arch", "sm90", "--toolchain", "triton-3.5", "--dry-run"], "toolchain 'triton-3.5'", "triton-3."),
])
def test_an_unknown_arch_or_toolchain_is_a_usage_error_before_anything_else(argv, wrong, suggestion, repo_root,
                                                                            capsys, monkeypatch):
    monkeypatch.setenv("MHA_CI_ASSUME_DEVICES", "")     # no GPU here: the answer must not be "no GPU"
    code = cli.main(["--root", str(repo_root), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"mha-ci: unknown {wrong}; known: "), err
    assert f"(did you mean '{suggestion}" in err and len(err.splitlines()) == 1, err
