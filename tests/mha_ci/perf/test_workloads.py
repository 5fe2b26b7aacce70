"""The workload set generated from pipelines/workloads.yaml, its keys, buckets and PR subset."""
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mha_ci.errors import ConfigError
from mha_ci.model.loader import load_pipeline
from mha_ci.perf.shapes import Shape, parse_key, visible_pairs
from mha_ci.perf.workloads import generate, raw_shapes, select_subset


@pytest.fixture(scope="module")
def workloads(repo_root=Path(__file__).resolve().parents[3]):
    return generate(load_pipeline(repo_root).workloads)


def test_key_format_is_designs():
    s = Shape("dense", 8, 48, 8, 2048, 2048, 64, 64, True)
    assert s.key == "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
    s = Shape("varlen", 1, 8, 1, 8192, 8192, 64, 64, False, window=(128, 0), sink=True, dropout_p=0.1)
    assert s.key == "varlen_b1_hq8_hk1_sq8192_sk8192_dqk64_dv64_c0_wl128_wr0_sink_drop"
    assert parse_key(s.key) == s
    with pytest.raises(ValueError):
        parse_key("dense_b8_hq48")


def test_a_backward_key_says_its_pass_and_round_trips():
    fwd = Shape("varlen", 1, 8, 1, 8192, 8192, 64, 64, False, window=(128, 0), sink=True)
    bwd = fwd.with_pass("bwd")
    assert bwd.key == fwd.key + "_bwd" and not fwd.key.endswith("_bwd")
    assert parse_key(bwd.key) == bwd and parse_key(fwd.key) == fwd
    assert Shape.from_dict(bwd.to_dict()) == bwd and bwd.to_dict()["pass"] == "bwd"
    # documents written before shapes had a pass hold forward shapes
    legacy = {k: v for k, v in fwd.to_dict().items() if k != "pass"}
    assert Shape.from_dict(legacy) == fwd
    assert bwd.flops == int(2.5 * fwd.flops)
    assert bwd.config_pass == "backward" and fwd.config_pass == "forward"
    with pytest.raises(ValueError, match="no backward"):
        Shape("dense", 64, 8, 1, 1, 1024, 128, 128, True).with_pass("bwd")
    with pytest.raises(ValueError, match="pass must be"):
        Shape("dense", 1, 8, 1, 16, 16, 64, 64, True, pass_="both")


def test_backward_shapes_cover_training_and_skip_decode(workloads):
    bwd = [w for w in workloads if w.shape.pass_ == "bwd"]
    assert bwd and all(w.shape.sq > 1 for w in bwd)
    keys = {w.key for w in workloads}
    # every backward shape has its forward twin, with the same origins
    assert all(w.key[:-len("_bwd")] in keys for w in bwd)
    assert {w.bucket for w in bwd} == {"default", "small_head_32", "small_head", "pe", "dropout_or_fp32"}
    assert {w.shape.layout for w in bwd} == {"dense", "varlen"}
    assert {w.shape.causal for w in bwd} == {True, False}
    assert any(w.shape.sink and w.shape.window != (-1, -1) for w in bwd)     # GPT-OSS
    assert {t for w in bwd for t in w.tags} <= {"model_shapes", "test"}      # workloads.yaml backward.sources


def test_visible_pairs_bottom_right_causal_and_window():
    assert visible_pairs(4, 4, False, (-1, -1)) == 16
    assert visible_pairs(4, 4, True, (-1, -1)) == 10
    assert visible_pairs(1, 1024, True, (-1, -1)) == 1024          # decode sees every key
    assert visible_pairs(4, 8, True, (-1, -1)) == 5 + 6 + 7 + 8     # bottom-right aligned
    assert visible_pairs(8, 8, True, (2, 0)) == 1 + 2 + 3 * 6


def test_full_set_size_dedup_and_tags(repo_root, workloads):
    raw = raw_shapes(load_pipeline(repo_root).workloads)
    keys = [w.key for w in workloads]
    assert len(keys) == len(set(keys)) == 309
    fwd = [w for w in workloads if w.shape.pass_ == "fwd"]
    assert len(fwd) == 231                               # ~240 in the study; docs/workloads.md
    assert len(raw) > len(fwd)                           # duplicates were merged
    by_key = {w.key: w for w in workloads}
    # Llama3-8B and Mixtral-8x7B share every shape: one entry, both models among its origins
    llama = by_key["dense_b1_hq32_hk8_sq8192_sk8192_dqk128_dv128_c1"]
    assert {o.model for o in llama.origins} >= {"Llama3-8B", "Mixtral-8x7B"}
    # the causal dense 8192 prefill is both a model shape and a bench shape: it keeps both tags
    assert llama.tags == ["model_shapes", "bench"]
    tags = Counter(t for w in workloads for t in w.tags)
    assert set(tags) == {"model_shapes", "bench", "test"}


def test_tensor_parallel_only_where_both_head_counts_divide(workloads):
    # Qwen3 (64/4) has no TP 8 entry; Llama3-70B (64/8) has hq 8 / hk 1 at TP 8
    qwen = [o for w in workloads for o in w.origins if o.model == "Qwen3-235B-A22B"]
    assert qwen and {o.tp for o in qwen} == {1}
    assert any(o.model == "Llama3-70B" and o.tp == 8 for w in workloads for o in w.origins
               if (w.shape.hq, w.shape.hk) == (8, 1))
    assert all(w.shape.hq % w.shape.hk == 0 for w in workloads)


def test_reference_shapes_exist_with_their_buckets(workloads):
    by_key = {w.key: w for w in workloads}
    assert by_key["dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"].bucket == "small_head"
    assert by_key["dense_b1_hq128_hk128_sq8192_sk8192_dqk192_dv128_c1"].bucket == "pe"
    assert by_key["varlen_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1"].bucket == "pe"
    assert by_key["dense_b1_hq128_hk8_sq8192_sk8192_dqk128_dv128_c1"].bucket == "default"
    gpt = by_key["dense_b1_hq64_hk8_sq8192_sk8192_dqk64_dv64_c1_wl128_wr0_sink"]
    assert gpt.shape.sink and gpt.shape.window == (128, 0)


def test_pr_subset_covers_every_bucket_and_layout_deterministically(repo_root, workloads):
    perf = load_pipeline(repo_root).perf
    subset = select_subset(workloads, perf.subset.size, perf.subset.always)
    again = select_subset(list(reversed(workloads)), perf.subset.size, perf.subset.always)
    assert [w.key for w in subset] == [w.key for w in again]
    assert 35 <= len(subset) <= 45
    # both passes of every (bucket, layout)
    groups = {(w.shape.pass_, w.bucket, w.shape.layout) for w in workloads}
    assert {(w.shape.pass_, w.bucket, w.shape.layout) for w in subset} == groups
    assert {(b, lay) for p, b, lay in groups if p == "bwd"} == {(b, lay) for p, b, lay in groups if p == "fwd"}
    assert {t for w in subset for t in w.tags} == {"model_shapes", "bench", "test"}
    assert set(perf.subset.always) <= {w.key for w in subset}
    flops = sorted(w.shape.flops for w in workloads)
    sub_flops = [w.shape.flops for w in subset]
    assert min(sub_flops) == flops[0] and max(sub_flops) == flops[-1]   # small and large


def test_the_bucket_rule_is_read_from_the_kernel_package_without_torch(repo_root):
    # The orchestrating side has no torch: mha.config (the rule's home) must import without it.
    probe = ("import sys\n"
             "from mha.config import select_bucket\n"
             "from mha_ci.perf.workloads import generate\n"
             "heavy = sorted(m for m in ('torch', 'triton', 'numpy', 'mha.interface') if m in sys.modules)\n"
             "assert not heavy, heavy\n"
             "print(select_bucket('forward', 64, 64, 'bf16', 0.0))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=repo_root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(repo_root / "src")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["small_head"]


def test_misspelt_key_and_unknown_always_key_are_config_errors(pipeline_root):
    path = pipeline_root / "pipelines" / "perf.yaml"
    original = path.read_text()
    path.write_text(original.replace("floor_pct:", "flor_pct:"))
    with pytest.raises(ConfigError) as err:
        load_pipeline(pipeline_root)
    assert err.value.suggestion == "floor_pct" and err.value.line is not None
    path.write_text(original.replace("- dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1",
                                     "- dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c0"))
    with pytest.raises(ConfigError) as err:
        load_pipeline(pipeline_root)
    assert err.value.suggestion == "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
    assert err.value.line is not None


def test_mha_ci_validate_checks_both_files(pipeline_root):
    from mha_ci.cli import main

    assert main(["--root", str(pipeline_root), "validate"]) == 0
    wl = pipeline_root / "pipelines" / "workloads.yaml"
    wl.write_text(wl.read_text().replace("tensor_parallel:", "tensor_paralel:"))
    assert main(["--root", str(pipeline_root), "validate"]) == 2
