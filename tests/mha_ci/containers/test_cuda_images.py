"""The sm90 images (containers/<toolchain>/Dockerfile.cuda): each holds its cuda lock's torch and
triton, torch is a CUDA build of the CUDA version the lock's nvidia-* wheels are, and the sm90
code objects compiled inside the image equal those of the toolchain's venv (the cpu platform's
environment, same triton: the CUDA packages must not change what Triton emits).

No GPU here: the driver comes from the host through `--gpus` on a GPU runner, so this checks
the image's content and its ahead-of-time compiles, not kernel launches.

Markers docker, slow and cuda_image: building both images takes ~12 min and ~14 GB of disk (plus
6.6 GB of wheelhouse), so `make test` leaves them out and `make test-cuda-images` runs them
(docs/containers.md).
"""
from __future__ import annotations

import json

import pytest

from mha_ci.checksums import verify as checksums_job
from mha_ci.executors import make_executor
from mha_ci.containers.engine import connect, ensure_image
from mha_ci.containers.images import spec_for
from mha_ci.executors.base import PayloadRun
from mha_ci.executors.docker import DockerExecutor
from mha_ci.model.loader import load_pipeline

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.cuda_image]

# toolchain -> (torch, torch.version.cuda, triton) its cuda lock pins
EXPECTED = {"triton-3.4": ("2.8.0", "12.8", "3.4.0"), "triton-3.8": ("2.14.1", "13.0", "3.8.0")}
# Forward and backward kernels of every bucket that selects them, for one problem
SAMPLE = "fp16-d64-causal"
CODE_OBJECT_FIELDS = ("key", "arch", "bucket", "sha256", "shared_bytes", "registers", "spills")


@pytest.fixture
def pipeline(repo_root):
    return load_pipeline(repo_root)


@pytest.fixture(scope="module")
def client():
    return connect()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cuda_image_holds_the_cuda_locks_torch_and_triton(client, pipeline, name, tmp_path):
    toolchain = pipeline.toolchains[name].on("cuda")
    spec = spec_for(toolchain)
    assert spec is not None and spec.lock.name == "requirements-cuda.lock"
    image = ensure_image(client, spec)
    print(f"{image.tag}: {'built' if image.built else 'present'} in {image.seconds:.0f} s, "
          f"{client.images.get(image.id).attrs['Size'] / 1e9:.2f} GB")
    probe = ("import json, torch, triton; print(json.dumps([torch.__version__, torch.version.cuda, "
             "triton.__version__, torch.backends.cudnn.is_available()]))")
    out = client.containers.run(image.id, ["python", "-c", probe], remove=True, network_mode="none")
    torch_version, cuda, triton_version, cudnn = json.loads(out.decode().strip().splitlines()[-1])
    want_torch, want_cuda, want_triton = EXPECTED[name]
    assert torch_version.split("+")[0] == want_torch
    assert cuda == want_cuda
    # ... and the CUDA runtime wheel the lock pins is that version (12.8.90, 13.0.96)
    runtime = [v for n, v in toolchain.pins.items() if n.startswith("nvidia-cuda-runtime")]
    assert runtime and runtime[0].startswith(want_cuda + ".")
    assert triton_version == want_triton
    assert cudnn, "torch found no cuDNN: the nvidia-cudnn wheel is not where torch looks"

    # the payload contract in the image: the job's pin check against the cuda lock passes
    cpu_arch = next(a for a in pipeline.archs.values() if a.device == "none")
    run = PayloadRun(module="pincheck", args=("--record", "versions.json"), toolchain=toolchain,
                     arch=cpu_arch, out_dir=tmp_path / "out", log_prefix=f"pincheck {name} cuda")
    result = DockerExecutor(build=False).run(run)
    assert (result.exit_code, result.error) == (0, None)
    assert result.provenance["image"] == spec.reference()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sm90_code_objects_in_the_cuda_image_equal_the_venvs(pipeline, repo_root, name, tmp_path):
    toolchain = pipeline.toolchains[name]
    sm90 = [pipeline.archs["sm90"]]
    cpu_arch = next(a for a in pipeline.archs.values() if a.device == "none")
    records, torch_builds = {}, {}
    for executor, platform in (("venv", "cpu"), ("docker", "cuda")):
        computed = checksums_job.compute(repo_root, toolchain, sm90, make_executor(executor, repo_root),
                                         tmp_path / executor, job_arch=cpu_arch, only=SAMPLE,
                                         use_cache=False, platform=platform)
        torch_builds[executor] = computed.codeobjs.toolchain.get("torch", "")
        records[executor] = sorted(tuple(getattr(r, f) for f in CODE_OBJECT_FIELDS)
                                   for r in computed.codeobjs.records)
        records[executor].append(("compile errors",) + tuple(sorted(e["key"] for e in computed.codeobjs.errors)))
    # each side compiled in its own environment: the cpu lock's torch in the venv, the cuda lock's
    # in the image (they differ: 2.13.0+cpu against 2.8.0 / 2.14.1)
    assert torch_builds == {"venv": toolchain.pins["torch"], "docker": toolchain.on("cuda").pins["torch"]}
    assert torch_builds["venv"] != torch_builds["docker"]
    sm90_objects = [r for r in records["venv"][:-1] if r[1] == "sm90"]
    assert len(sm90_objects) >= 2, "the sample selected fewer than two sm90 variants"
    assert records["docker"] == records["venv"]
    print(f"{name}: {len(sm90_objects)} sm90 code objects identical in the cuda image and the venv")
