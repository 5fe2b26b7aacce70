"""The one resolver of a perf measurement's settings (mha_ci.perf.request)."""
import pytest

from mha_ci.errors import ConfigError
from mha_ci.model.loader import load_pipeline
from mha_ci.perf.config import gate_policy
from mha_ci.perf.measure import PayloadCall, PayloadInputs, run_payload, write_inputs
from mha_ci.perf.request import perf_request


@pytest.fixture
def pipeline(pipeline_root):
    return load_pipeline(pipeline_root)


def test_every_option_is_checked_once_with_the_option_named(pipeline, tmp_path):
    def request(**kw):
        base = dict(arch="sm90", toolchains=("triton-3.4",), out_dir=tmp_path, executor=None)
        return perf_request(pipeline, **{**base, **kw})

    for kw, key in ((dict(arch="sm91"), "--arch"), (dict(toolchains=("triton-3.4", "triton-9")), "--toolchain"),
                    (dict(subset="most"), "--subset"), (dict(repeat=0), "--repeat"), (dict(kernel="fa"), "--kernel")):
        with pytest.raises(ConfigError) as refused:
            request(**kw)
        assert refused.value.key == key, kw
    with pytest.raises(ConfigError) as refused:
        request(subset="most", subset_key="MHA_CI_PERF_SUBSET")
    assert refused.value.key == "MHA_CI_PERF_SUBSET"
    assert request().subset == "full"


def test_the_gate_is_the_one_source_of_the_stall_rule(pipeline, tmp_path):
    request = perf_request(pipeline, arch="sm90", toolchains=("triton-3.4",), out_dir=tmp_path, executor=None)
    assert request.gate == gate_policy(pipeline.perf)
    assert (request.method.stall_factor, request.method.stall_min_excess_us) == \
        (request.gate.stall_factor, request.gate.stall_min_excess_us)
    assert request.against_gate.floor_pct == pipeline.perf.against.floor_pct and request.against_gate.require_numerics


def test_inputs_name_their_folder_and_a_custom_selection(pipeline, tmp_path):
    request = perf_request(pipeline, arch="sm90", toolchains=("triton-3.4",), subset="pr", out_dir=tmp_path,
                           executor=None, keys=["dense_*"])
    inputs = write_inputs(request, "here")
    assert inputs.rel == "here" and inputs.count == len(request.workloads()) > 0
    assert (tmp_path / "here" / "shapes.json").is_file() and (tmp_path / "here" / "method.json").is_file()
    assert request.selection == "custom"


def test_run_payload_needs_an_executor(pipeline, tmp_path):
    request = perf_request(pipeline, arch="sm90", toolchains=("triton-3.4",), out_dir=tmp_path, executor=None)
    with pytest.raises(ValueError):
        run_payload(request, PayloadInputs("x", 0), PayloadCall("triton-3.4"))
