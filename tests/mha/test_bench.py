"""mha.bench's result check: a config is timed only after its results match a reference, so a
miscompile (the warp-specialized forward's wrong rows, docs/records/2026-12-01-h200-ws-forward)
is reported as wrong, never as fast. The check runs wherever mha runs (the interpreter here)."""
import pytest
import torch

import mha
from mha import bench

SHAPE = (1, 4, 2, 40, 32, 32, True)   # (batch, Hq, Hk, S, Dqk, Dv, causal)
FP16 = torch.float16                   # the interpreter refuses bf16 (mha.validation)


def test_reduced_keeps_one_kv_head_and_its_query_group():
    assert bench.reduced((8, 48, 8, 2048, 64, 64, True)) == (8, 6, 1, 2048, 64, 64, True)


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
def test_right_results_pass(device, backward):
    assert bench.check(SHAPE, backward, device=device, dtype=FP16) is None


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
def test_wrong_rows_are_caught(device, monkeypatch, backward):
    real = mha.flash_attn_func

    def second_half_off(*args, **kwargs):
        out = real(*args, **kwargs)
        return torch.cat([out[:, :20], out[:, 20:] + 0.5], dim=1)   # rows 20.. off, as the miscompile was

    monkeypatch.setattr(mha, "flash_attn_func", second_half_off)
    assert bench.check(SHAPE, backward, device=device, dtype=FP16).startswith("out: max error")


def test_a_wrong_config_is_not_timed(device, monkeypatch):
    monkeypatch.setattr(bench, "check", lambda *a, **k: "out: max error 1 > 0.01")
    timed = []
    monkeypatch.setattr(bench, "_time", lambda fn: timed.append(fn) or 1.0)
    assert bench._tflops(lambda: None, SHAPE, False, lambda: bench.check(SHAPE, False)) == "wrong"
    assert not timed


def test_shapes_are_chosen_by_key_and_an_unknown_key_is_refused():
    small = bench.key(bench.SHAPES[1])
    assert bench.chosen_shapes([small]) == [bench.SHAPES[1]]
    assert bench.chosen_shapes(None) == bench.SHAPES
    with pytest.raises(ValueError, match="unknown shape.*b9_nope"):
        bench.chosen_shapes([small, "b9_nope"])


def test_any_shape_of_the_key_form_can_be_chosen_and_its_key_round_trips():
    d32 = "b4_hq16_hk16_s2048_dqk32_dv32_c1"
    assert bench.chosen_shapes([d32]) == [(4, 16, 16, 2048, 32, 32, True)]
    assert bench.key(bench.chosen_shapes([d32])[0]) == d32
    for bad in ("b4_hq16_hk6_s2048_dqk32_dv32_c1", "b0_hq16_hk16_s2048_dqk32_dv32_c1",
                "b4_hq16_hk16_s2048_dqk32_dv32_c2", " b4_hq16_hk16_s2048_dqk32_dv32_c1"):
        with pytest.raises(ValueError, match="unknown shape"):
            bench.chosen_shapes([bad])


def test_the_single_pass_candidates_are_checked_and_right(device):
    for cfg in bench.SWEEPS["backward-single-pass"][:2]:
        assert bench.check(SHAPE, True, config={"backward": cfg}, device=device, dtype=FP16) is None
