"""The refresh pull request's description (mha_ci.refresh.report): both passes apart."""
from __future__ import annotations

from mha_ci.perf.compare import compare
from mha_ci.refresh.core import RefreshPolicy
from mha_ci.refresh.report import pr_body

from perf_builders import doc, entry, gate

FWD = ("dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1", "dense_b1_hq128_hk8_sq8192_sk8192_dqk128_dv128_c1")
BWD = tuple(k + "_bwd" for k in FWD)
CODE = {"attn_fwd": "f" * 64, "attn_bwd_dkdv": "a" * 64}
POLICY = RefreshPolicy(max_noise_pct=5.0, gate=gate(floor_pct=3.0, k=1.0))


def coded(key: str, us: float, code: dict = CODE) -> dict:
    e = entry(key, us, noise=1.0)
    e["code_objects"] = dict(code)
    return e


def body(old: dict | None, new: dict) -> str:
    c = compare(old, new, POLICY.gate) if old else None
    return pr_body(arch="sm90", date="2026-12-01", branch="b", base_commit="abc", measured={"triton-3.4": new},
                   olds={"triton-3.4": old}, comparisons={"triton-3.4": c}, policy=POLICY, other_files=[])


def test_moved_shapes_are_grouped_by_pass_with_their_code_identity():
    old = doc([coded(FWD[0], 100.0), coded(FWD[1], 200.0), coded(BWD[0], 300.0), coded(BWD[1], 400.0)])
    new = doc([coded(FWD[0], 100.5), coded(FWD[1], 200.0), coded(BWD[0], 336.0, {**CODE, "attn_bwd_dkdv": "b" * 64}),
               coded(BWD[1], 360.0)])
    text = body(old, new)
    assert "| triton-3.4 | fwd | 2 | 0 | 0 | 0 | 0 |" in text
    assert "| triton-3.4 | bwd | 2 | 1 | 1 | 0 | 0 |" in text
    moved = text.split("## Shapes beyond their threshold")[1].split("## Provenance")[0]
    assert "### Forward (fwd)" not in moved                    # nothing of the forward moved
    backward = moved.split("### Backward (bwd)")[1]
    # +12.0 % on new code; -10.0 % on the same code (a move the kernel did not make)
    assert f"| triton-3.4 | `{BWD[0]}` | 300.0 | 1.0 % | 336.0 | 1.0 % | +12.0 % | 3.0 % | regression | no |" in backward
    assert f"| triton-3.4 | `{BWD[1]}` | 400.0 | 1.0 % | 360.0 | 1.0 % | -10.0 % | 3.0 % | improvement | yes |" \
        in backward
    every = text.split("Every shape, old vs new")[1]
    assert [every.index(f"`{k}`") for k in (FWD[1], FWD[0], BWD[1], BWD[0])] == \
        sorted(every.index(f"`{k}`") for k in FWD + BWD)     # forward rows first, then backward


def test_a_forward_only_refresh_has_no_backward_rows():
    old = doc([entry(k, 100.0, noise=1.0) for k in FWD])
    new = doc([entry(FWD[0], 110.0, noise=1.0), entry(FWD[1], 100.0, noise=1.0)])
    text = body(old, new)
    assert "| bwd |" not in text and "Backward" not in text
    assert "### Forward (fwd)\n\n" in text and "| +10.0 % | 3.0 % | regression | - |" in text
    first = body(None, new)                                   # a first baseline moves nothing
    assert "| triton-3.4 | fwd | 2 | 0 | 0 | all (first baseline) | 0 |" in first
    assert "## Shapes beyond their threshold\n\nNone." in first
