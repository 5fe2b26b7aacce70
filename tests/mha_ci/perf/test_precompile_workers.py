"""How many processes a GPU perf payload compiles its kernels on before timing (perf.measure)."""
import pytest


def test_precompile_workers_share_the_cpus_between_the_sides(monkeypatch):
    from mha_ci.errors import ConfigError
    from mha_ci.perf.measure import MAX_PRECOMPILE_WORKERS, precompile_workers

    monkeypatch.delenv("MHA_CI_PRECOMPILE_WORKERS", raising=False)
    assert precompile_workers(2, cpus=16) == 8 and precompile_workers(1, cpus=64) == MAX_PRECOMPILE_WORKERS
    assert precompile_workers(2, cpus=2) == 1 and precompile_workers(2, cpus=1) == 1
    monkeypatch.setenv("MHA_CI_PRECOMPILE_WORKERS", "0")
    assert precompile_workers(2, cpus=16) == 0
    monkeypatch.setenv("MHA_CI_PRECOMPILE_WORKERS", "many")
    with pytest.raises(ConfigError, match="MHA_CI_PRECOMPILE_WORKERS"):
        precompile_workers(1)
