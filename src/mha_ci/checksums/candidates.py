"""Candidate configs compiled ahead of time, on the CPU environment of a toolchain: the compile
payload (`python -m mha_ci.payloads.tune compile`) run through an executor and the checksums
compile cache. `mha-ci tune` compiles its candidates with it (tune/plan.py), `mha-ci perf bisect`
a commit's own configs (an empty override; bisect/code.py)."""
from __future__ import annotations

import json
from pathlib import Path

from mha_ci.checksums.verify import cache_dir
from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.base import PayloadRun
from mha_ci.files import read_json, write_atomic
from mha_ci.model.lockfile import lock_sha256

COMPILE_TIMEOUT_S = 4 * 3600


def compile_candidates(root: Path, toolchain, arch, pipeline, items: list[dict], executor, out: Path,
                       jobs: int | None) -> dict:
    """Run the compile payload on the CPU environment of the toolchain (no GPU needed)."""
    backend, target_arch, warp = arch.compile_target
    request = {"targets": {arch.name: f"{backend}:{target_arch}:{warp}"}, "items": items,
               # the compile stops before code generation above it (prune's "shared" rule)
               "shared_limits": {arch.name: arch.limits.shared_bytes} if arch.limits else {}}
    request_path = Path(out) / "compile" / "request.json"
    request_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(request_path, json.dumps(request, indent=1, sort_keys=False) + "\n")
    result_path = Path(out) / "compile" / "results.json"
    result_path.unlink(missing_ok=True)
    env_toolchain = toolchain.on("cpu") if executor.name != "host" else toolchain.on(arch.platform)
    args = ["compile", "--request", "compile/request.json", "--out", "compile/results.json",
            "--cache-dir", str(cache_dir(root) / toolchain.name)]
    if env_toolchain.lock and Path(env_toolchain.lock).is_file():
        args += ["--lock-sha256", lock_sha256(env_toolchain.lock)]
    if jobs:
        args += ["--jobs", str(jobs)]
    cpu_arch = next((a for a in pipeline.archs.values() if a.device == "none"), arch)
    result = executor.run(PayloadRun(module="tune", args=tuple(args), toolchain=env_toolchain,
                                     arch=cpu_arch if executor.name != "host" else arch, out_dir=Path(out),
                                     timeout_s=COMPILE_TIMEOUT_S, log_prefix=f"tune compile {toolchain.name}",
                                     caches=(cache_dir(root) / toolchain.name,)))
    data = read_json(result_path)
    if result.exit_code != 0 or data is None:
        raise EnvironmentProblem(f"the tune compile payload ({toolchain.name}) produced no result "
                                 f"(exit {result.exit_code}{', ' + result.error if result.error else ''})")
    return data
