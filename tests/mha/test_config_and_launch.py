"""Config files, the bucket rule, arch detection and the kernel-spec contract."""
import json

import pytest
import torch

import mha
from mha import config, launch
from mha.arch import KNOWN_ARCHS


@pytest.mark.parametrize("arch", KNOWN_ARCHS)
def test_every_arch_file_loads_with_all_buckets(arch):
    data = config.load_arch_configs(arch)
    for pass_ in config.PASSES:
        assert set(config.BUCKETS) <= set(data[pass_])


def test_config_loaded_once():
    # Without clearing the cache: other test modules hold the loaded dicts (and patch them).
    hits = config.load_arch_configs.cache_info().hits
    assert config.load_arch_configs("sm90") is config.load_arch_configs("sm90")
    assert config.load_arch_configs.cache_info().hits >= hits + 1


def test_unknown_arch_names_file_and_known_archs():
    with pytest.raises(config.ConfigFileError) as e:
        config.load_arch_configs("sm80")
    msg = str(e.value)
    assert "sm80-MHA-DEFAULT.json" in msg and all(a in msg for a in KNOWN_ARCHS)


@pytest.mark.parametrize("dqk,dv,dtype,p,bucket", [
    (128, 128, "bf16", 0.0, "default"),
    (64, 64, "fp16", 0.0, "small_head"),
    (48, 48, "bf16", 0.0, "small_head"),
    (33, 33, "fp16", 0.0, "small_head"),        # the small_head gate is 32 < Dv <= 64
    (32, 32, "bf16", 0.0, "small_head_32"),
    (17, 17, "fp16", 0.0, "small_head_32"),     # the small_head_32 gate is 16 < Dv <= 32
    (16, 16, "fp16", 0.0, "default"),
    (80, 80, "fp16", 0.0, "default"),
    (192, 128, "bf16", 0.0, "pe"),
    (128, 128, "fp32", 0.0, "dropout_or_fp32"),
    (129, 129, "fp16", 0.0, "large_head"),      # the first head dim padded to 256
    (160, 160, "bf16", 0.0, "large_head"),
    (256, 256, "fp16", 0.0, "large_head"),
    (64, 256, "bf16", 0.0, "large_head"),       # Dqk < Dv: the wide tile is the PV one
    (256, 160, "bf16", 0.0, "large_head"),      # Dqk > Dv but the V tile is 256 wide too
    (256, 128, "bf16", 0.0, "pe"),
    (192, 128, "bf16", 0.1, "large_head_dropout_or_fp32"),
    (256, 256, "fp32", 0.0, "large_head_dropout_or_fp32"),
    (128, 128, "bf16", 0.1, "dropout_or_fp32"),
])
def test_select_bucket(dqk, dv, dtype, p, bucket):
    for pass_ in config.PASSES:
        assert config.select_bucket(pass_, dqk, dv, dtype, p) == bucket


def test_guard_clamps_stages_for_tiny_head_dims():
    _, cfg = config.resolve("forward", "sm90", 16, 16, "fp16", 0.0)
    assert cfg["num_stages"] <= 2
    _, cfg = config.resolve("forward", "sm90", 128, 128, "fp16", 0.0)
    assert cfg["num_stages"] == json.loads(config.config_path("sm90").read_text())["forward"]["default"]["num_stages"]


def test_override_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown key 'BLOK_M'; did you mean 'BLOCK_M'"):
        config.resolve("forward", "sm90", 64, 64, "fp16", 0.0, {"BLOK_M": 64})


# config= overrides that used to run (on garbage), fail inside Triton or Python, or be ignored:
# each is refused by a ValueError naming the key before anything is launched.
BAD_OVERRIDES = {
    "block_m_negative": ({"BLOCK_M": -16}, r"config\['BLOCK_M'\]: expected a power of two from 16 to 256, got -16"),
    "block_m_3": ({"BLOCK_M": 3}, r"config\['BLOCK_M'\]: expected a power of two .*got 3"),
    "block_m_0": ({"BLOCK_M": 0}, r"config\['BLOCK_M'\]: expected a power of two .*got 0"),
    "block_n_negative": ({"BLOCK_N": -32}, r"config\['BLOCK_N'\]: expected a power of two .*got -32"),
    "block_n_512": ({"BLOCK_N": 512}, r"config\['BLOCK_N'\]: expected a power of two from 16 to 256, got 512"),
    "block_m2_24": ({"backward": {"BLOCK_M2": 24}}, r"config\['backward'\]\['BLOCK_M2'\]: .*got 24"),
    "block_m_str": ({"BLOCK_M": "32"}, r"config\['BLOCK_M'\]: expected an int, got str '32'"),
    "block_m_float": ({"BLOCK_M": 16.7}, r"config\['BLOCK_M'\]: expected an int, got float 16.7"),
    "block_m_bool": ({"BLOCK_M": True}, r"config\['BLOCK_M'\]: expected an int, got the bool True"),
    "num_warps_negative": ({"num_warps": -1}, r"config\['num_warps'\]: expected a power of two from 1 to \d+"),
    "num_warps_3": ({"num_warps": 3}, r"config\['num_warps'\]: expected a power of two .*got 3"),
    "num_stages_0": ({"num_stages": 0}, r"config\['num_stages'\]: expected an int from 1 to 8, got 0"),
    "num_stages_9": ({"forward": {"num_stages": 9}}, r"config\['forward'\]\['num_stages'\]: .*got 9"),
    "not_a_dict": ("garbage", r"config: expected a dict of config keys .*got str 'garbage'"),
    "section_not_a_dict": ({"forward": "x"}, r"config\['forward'\]: expected a dict of forward config keys, got str"),
    "unknown_key": ({"BLOK_M": 32}, r"config: unknown key 'BLOK_M'; did you mean 'BLOCK_M'\?"),
    "unknown_key_case": ({"num_warp": 4}, r"config: unknown key 'num_warp'; did you mean 'num_warps'\?"),
    "unknown_key_in_section": ({"forward": {"block_n": 32}},
                               r"config\['forward'\]: unknown key 'block_n'; did you mean 'BLOCK_N'\?"),
    "other_pass_key_in_section": ({"forward": {"BLOCK_M1": 16}},
                                  r"config\['forward'\]: 'BLOCK_M1' is a backward key"),
    "ws_in_backward": ({"backward": {"warp_specialize": True}},
                       r"config\['backward'\]: 'warp_specialize' is a forward key"),
    "flat_beside_section": ({"forward": {"BLOCK_M": 32}, "num_warps": 4},
                            r"config: flat keys \['num_warps'\] beside the section 'forward'"),
    "unmasked": ({"forward": {"unmasked": {"BLOCK_M": 32}}}, r"config\['forward'\]: 'unmasked' is a config-file key"),
    "ws_not_bool": ({"warp_specialize": 1}, r"config\['warp_specialize'\]: expected a bool, got int 1"),
}
# Of a wrong Python type: a TypeError as well (as mha.validation's ArgumentTypeError).
WRONG_TYPES = {"block_m_str", "block_m_float", "block_m_bool", "not_a_dict", "section_not_a_dict", "ws_not_bool"}


@pytest.mark.parametrize("override,match", list(BAD_OVERRIDES.values()), ids=list(BAD_OVERRIDES))
def test_bad_overrides_are_refused_before_any_launch(override, match, monkeypatch, device, request):
    def refuse(*_args, **_kw):
        raise AssertionError("a kernel was launched with a config that should have been refused")

    monkeypatch.setattr(launch, "forward", refuse)
    monkeypatch.setattr(launch, "backward", refuse)
    q = torch.zeros(1, 16, 2, 16, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match=match) as info:
        mha.flash_attn_func(q, q, q, config=override)
    assert isinstance(info.value, mha.validation.AttentionInputError)   # the one family of input errors
    assert isinstance(info.value, TypeError) == (request.node.callspec.id in WRONG_TYPES)


def test_num_warps_limit_is_the_archs():
    """1024 threads a block: 32 warps of 32 lanes on sm90, 16 wavefronts of 64 on AMD."""
    _, cfg = config.resolve("forward", "sm90", 64, 64, "fp16", 0.0, {"num_warps": 32})
    assert cfg["num_warps"] == 32
    with pytest.raises(ValueError, match=r"config\['num_warps'\]: expected a power of two from 1 to 16 on gfx942"):
        config.resolve("forward", "gfx942", 64, 64, "fp16", 0.0, {"num_warps": 32})


def test_valid_override_forms_still_resolve():
    import numpy as np

    flat = {"BLOCK_M": 64, "BLOCK_N": np.int64(32), "BLOCK_M1": 16, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 16,
            "num_warps": 4, "num_stages": 1}
    nested = {"forward": {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1},
              "backward": {"BLOCK_M1": 16, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 16, "num_warps": 4,
                           "num_stages": 1}}
    for override in (flat, nested):
        bucket, fwd = config.resolve("forward", "gfx942", 64, 64, "fp16", 0.0, override)
        assert bucket == "small_head+override" and fwd == nested["forward"]
        assert all(type(v) is int for v in fwd.values())
        _, bwd = config.resolve("backward", "gfx942", 64, 64, "fp16", 0.0, override)
        assert bwd == nested["backward"]
    for nothing in (None, {}, {"forward": {}}):
        bucket, cfg = config.resolve("forward", "sm90", 64, 64, "fp16", 0.0, nothing)
        assert (bucket, cfg) == config.resolve("forward", "sm90", 64, 64, "fp16", 0.0)
    # keys of the other pass in a flat override are that pass's; one section leaves the other pass alone
    assert config.resolve("forward", "sm90", 64, 64, "fp16", 0.0, {"BLOCK_M1": 32})[0] == "small_head"
    assert config.resolve("backward", "sm90", 64, 64, "fp16", 0.0, {"forward": {"num_warps": 8}})[0] == "small_head"


@pytest.mark.parametrize("props,is_hip,expected", [
    (dict(major=9, minor=0, gcnArchName="NVIDIA H200"), False, "sm90"),
    (dict(major=8, minor=0, gcnArchName="NVIDIA A100"), False, "sm80"),
    (dict(major=9, minor=4, gcnArchName="gfx942:sramecc+:xnack-"), True, "gfx942"),
    (dict(major=9, minor=5, gcnArchName="gfx950:sramecc+:xnack-"), True, "gfx950"),
], ids=["h200", "a100", "mi300x", "mi355x"])
def test_arch_from_device_properties(props, is_hip, expected):
    from types import SimpleNamespace

    assert mha.arch.arch_from_properties(SimpleNamespace(**props), is_hip) == expected


def test_arch_detection_interpreter_on_cpu():
    assert mha.arch.current_arch(torch.device("cpu")) == "interpreter"


PROBLEMS = [launch.Problem("fp16", 64, 64), launch.Problem("bf16", 192, 128, causal=True, has_sink=True),
            launch.Problem("fp32", 40, 40, window=(8, -1), dropout=True, varlen=True)]


@pytest.mark.parametrize("problem", PROBLEMS, ids=["plain", "pe_causal_sink", "fp32_window_dropout_varlen"])
@pytest.mark.parametrize("arch", KNOWN_ARCHS)
def test_kernel_specs_match_kernel_signatures(problem, arch):
    specs = launch.kernel_specs(problem, arch)
    # The Triton kernels always (every fallback ends there); a config may add its alternatives.
    assert {"fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq"} <= set(specs)
    assert set(specs) <= {"fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq", "bwd_dkdv_dq", "fwd_gluon",
                          "fwd_gluon_tile", "bwd_dkdv_gluon", "bwd_dq_gluon", "bwd_dkdv_ws", "bwd_dq_ws"}
    for name, spec in specs.items():
        assert spec.name == name
        # Argument order of the signature is the kernel's own order, constexprs included.
        assert list(spec.signature) == list(spec.fn.arg_names)
        assert {n for n, t in spec.signature.items() if t == "constexpr"} == set(spec.constexprs)
        for n, t in spec.signature.items():
            # The Gluon kernels take TMA descriptors (forward_gluon.desc_type names them).
            assert t in {"*fp16", "*bf16", "*fp32", "*i32", "i32", "i64", "fp32", "constexpr"} or (
                "gluon" in name and t.startswith("tensordesc<"))
        assert spec.pass_ == ("forward" if name.startswith("fwd") else "backward")
        assert "stride_qd" not in spec.signature  # last-dim strides are never passed
    assert specs["fwd"].signature["Q"] == "*" + problem.dtype
    assert specs["fwd"].constexprs["BOUND_RIGHT"] == (problem.causal or problem.window[1] >= 0)
    assert specs["fwd"].constexprs["IS_VARLEN"] == problem.varlen


def test_runtime_launch_uses_kernel_specs(monkeypatch, device):
    """The launcher runs exactly the specs kernel_specs returns (same constexprs, warps, stages)."""
    seen = []
    real = launch._launch

    def spy(spec, grid, args):
        seen.append(spec)
        return real(spec, grid, args)

    monkeypatch.setattr(launch, "_launch", spy)
    q = torch.randn(1, 20, 2, 32, device=device, dtype=torch.float16, requires_grad=True)
    out = mha.flash_attn_func(q, q, q, causal=True)
    out.sum().backward()
    expected = launch.kernel_specs(launch.Problem("fp16", 32, 32, causal=True), mha.arch.current_arch(q.device))
    assert [s.name for s in seen] == ["fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq"]
    for s in seen:
        e = expected[s.name]
        assert (s.constexprs, s.num_warps, s.num_stages, s.signature) == (e.constexprs, e.num_warps, e.num_stages, e.signature)


def test_aligned_specialization_lists_every_runtime_argument():
    spec = launch.kernel_specs(PROBLEMS[0], "sm90")["fwd"]
    spec_map = launch.aligned_specialization(spec)
    assert spec_map["Q"] == "aligned16" and spec_map["stride_qs"] == "aligned16"
    assert spec_map["seqlen_q"] == "none" and spec_map["qk_scale"] == "none"
    assert set(spec_map) == {n for n, t in spec.signature.items() if t != "constexpr"}


def test_config_file_violating_its_own_guard_is_refused(tmp_path, monkeypatch):
    data = json.loads(config.config_path("sm90").read_text())
    data["guards"].append({"id": "no-stage-3", "forbid": {"num_stages": [3]}, "why": "test prohibition"})
    (tmp_path / "sm90-MHA-DEFAULT.json").write_text(json.dumps(data))
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    config.load_arch_configs.cache_clear()
    try:
        with pytest.raises(config.ConfigFileError, match="no-stage-3.*test prohibition"):
            config.load_arch_configs("sm90")
    finally:
        config.load_arch_configs.cache_clear()


def test_guards_apply_to_overrides_too():
    # a config= override cannot launch what a guard replaces (the tuner's candidates are overrides)
    _, cfg = config.resolve("forward", "sm90", 16, 16, "fp16", 0.0, {"num_stages": 4})
    assert cfg["num_stages"] == 2


@pytest.mark.parametrize("d,split", [(8, (16, 0)), (64, (64, 0)), (40, (64, 0)), (80, (128, 0)), (96, (128, 0)),
                                     (112, (128, 0)), (160, (128, 32)), (192, (128, 64)), (224, (256, 0))])
def test_head_split_pads_less_or_not_at_all(d, split):
    first, second = launch.head_split(d)
    assert (first, second) == split
    assert first + second >= d and first & (first - 1) == 0 and second & (second - 1) == 0


@pytest.mark.parametrize("kv_slices,per_slice,tiles,chunk", [
    (8, 64, 512, 8),      # 8 slices of 64 tiles: one chunk of 512
    (128, 64, 512, 8),
    (64, 16, 512, 32),
    (6, 64, 512, 6),      # fewer tiles than asked: every slice in one chunk
    (12, 100, 512, 6),    # 6 is the smallest divisor of 12 reaching 512 (5 does not divide)
    (7, 100, 512, 7),
    (0, 0, 512, 1),
])
def test_tile_chunk_is_a_divisor_reaching_the_tile_count(kv_slices, per_slice, tiles, chunk):
    assert launch.tile_chunk(kv_slices, per_slice, tiles) == chunk


def test_tile_chunk_matches_its_definition():
    """Brute force over small cases: the smallest divisor d of n with d * per >= tiles and at most
    MAX_GRID_YZ chunks, n itself when none (or nothing to launch)."""
    def oracle(n, per, tiles):
        ok = [d for d in range(1, n + 1) if n % d == 0 and d * per >= tiles and n // d <= launch.MAX_GRID_YZ]
        return ok[0] if ok else n
    for n in range(1, 200):
        for per in (0, 1, 3, 16, 96, 600):
            for tiles in (1, 7, 512):
                assert launch.tile_chunk(n, per, tiles) == oracle(n, per, tiles), (n, per, tiles)
    assert launch.tile_chunk(200_000, 1, 1) == 4    # 50000 chunks: within the y/z limit, unlike 1 or 2


@pytest.mark.parametrize("chunk_tiles", [1, 7, 10**6], ids=["one-slice", "some-slices", "all"])
def test_every_tile_order_covers_every_tile(monkeypatch, chunk_tiles, device):
    """Several chunks, chunks of one KV slice and one chunk for all: every tile of the forward
    and of both backward kernels is computed once (a missed tile leaves torch.empty garbage)."""
    from cases import Case, run_dense

    monkeypatch.setattr(launch, "TILE_CHUNK_TILES", chunk_tiles)
    run_dense(Case(batch=3, seqlen_q=80, seqlen_k=80, heads_q=4, heads_k=2, dqk=32, dv=32, causal=True),
              torch.float16, device)


def test_grid_past_the_y_z_limit_is_a_clear_error(monkeypatch, device):
    """More blocks than a grid axis holds: a ValueError naming the kernel and the limit, not a
    CUDA launch failure."""
    monkeypatch.setattr(launch, "MAX_GRID_YZ", 2)
    q = torch.zeros(1, 1000, 2, 32, dtype=torch.float16, device=device)    # more than 2 blocks on any arch
    with pytest.raises(ValueError, match=r"fwd: grid .* passes the 2 limit"):
        mha.flash_attn_func(q, q, q)


D128_CAUSAL = launch.Problem(dtype="bf16", dqk=128, dv=128, causal=True)


def test_call_specs_are_built_once_per_problem_and_read_only():
    first = launch.call_specs(D128_CAUSAL, "sm90")
    assert launch.call_specs(D128_CAUSAL, "sm90") is first
    assert launch.call_specs(launch.Problem(dtype="fp16", dqk=128, dv=128, causal=True), "sm90") is not first
    built = launch.kernel_specs(D128_CAUSAL, "sm90")
    assert {n: (s.fn, s.constexprs, s.num_warps, s.num_stages) for n, s in first.items()} == \
        {n: (s.fn, s.constexprs, s.num_warps, s.num_stages) for n, s in built.items()}
    with pytest.raises(TypeError):
        first["fwd"] = first["bwd_dq"]


def test_call_specs_with_an_override_are_built_for_that_call_alone():
    override = {"backward": {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64,
                             "num_warps": 4, "num_stages": 2}}
    chosen = launch.call_specs(D128_CAUSAL, "sm90", override)
    assert chosen["bwd_dkdv"].constexprs["BLOCK_N"] == 64
    default = launch.call_specs(D128_CAUSAL, "sm90")
    assert default["bwd_dkdv"].constexprs == launch.kernel_specs(D128_CAUSAL, "sm90")["bwd_dkdv"].constexprs
    assert launch.call_specs(D128_CAUSAL, "sm90", override) is not chosen


@pytest.mark.parametrize("version,gluon", [("3.4.0", False), ("3.8.0", True)])
def test_call_specs_follow_the_triton_version(monkeypatch, version, gluon):
    if gluon:
        pytest.importorskip("mha.kernels.forward_gluon", exc_type=ImportError,
                            reason="this Triton has no Hopper Gluon (the Gluon forward imports it)")
    launch.call_specs(D128_CAUSAL, "sm90")                      # cached under the real version
    monkeypatch.setattr(config, "triton_version", lambda: version)
    assert ("fwd_gluon" in launch.call_specs(D128_CAUSAL, "sm90")) is gluon
