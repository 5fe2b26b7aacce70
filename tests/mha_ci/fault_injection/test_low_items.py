"""Smaller gaps of issue 34: values that were ignored or errors that said too little."""
import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode


@pytest.mark.parametrize("value", ["sm90:x", "nvidia-gpu,cuda", "amd"])
def test_an_unknown_assumed_device_is_a_usage_error_naming_the_variable(repo_root, tmp_path, monkeypatch, capsys,
                                                                         value):
    monkeypatch.setenv("MHA_CI_ASSUME_DEVICES", value)
    code = main(["--root", str(repo_root), "run", "--job", "correctness-interpreter-triton-3.8-1of2",
                 "--out", str(tmp_path / "out")])
    assert code == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "MHA_CI_ASSUME_DEVICES" in err and "nvidia-gpu" in err


@pytest.mark.parametrize("value", ["", "none", "amd-gpu, nvidia-gpu"])
def test_known_assumed_devices_are_taken(value):
    from mha_ci.executors.devices import available_devices

    assert "none" in available_devices(value)


def test_perf_history_of_an_unknown_arch_names_the_known_ones(repo_root, tmp_path, capsys):
    code = main(["--root", str(repo_root), "perf", "history", "--arch", "sm91", "--toolchain", "triton-3.4",
                 "--out", str(tmp_path / "out")])
    assert code == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "archs with baselines: sm90 " in err and "did you mean 'sm90'" in err
