"""Ahead-of-time compiles of kernel variants, without a GPU, as the runtime would compile them.

Runs inside a toolchain environment (payload side): stdlib + triton + the kernel package.

Why each setting:
- TRITON_DISABLE_LINE_INFO=1: code objects otherwise embed the source file's path through debug
  line info, so one kernel hashes differently in two checkouts (docs/facts.md, line-info path leak).
- TRITON_HIP_LLD_PATH: Triton 3.4 links AMD code objects with an external ld.lld, and Debian's
  default lld 14 fails to link them; lld 19 works. Triton >= 3.5 links by itself. A toolchain
  that needs a linker and has none is an environment error for its AMD variants, never a skip.
- TRITON_CACHE_DIR: a fresh folder per process, so a compile we time or compare is a real
  compile. Reuse across runs is what our own cache (mha_ci.checksums.cache) is for; its key is
  coarser than Triton's but covers the config JSON and the toolchain lock too.
- Argument attributes: the runtime marks pointers 16-byte aligned ("D") and, on AMD with buffer
  ops on (default in 3.8), within 2 GiB ("S"); the descriptors are asked from the backend itself
  with an aligned stand-in tensor, so each Triton version gets exactly what its runtime would
  give an aligned launch.
- Shared memory gate: Triton fixes a kernel's shared memory / LDS in the TTGIR -> LLIR stage
  (metadata "shared", both backends, 3.4 and 3.8), before the code-generation stages (ptx ->
  cubin through ptxas; amdgcn -> hsaco). An over-limit tile config is refused there: ptxas on
  one (sm90, 256x256 tiles, 8 stages) takes minutes at 11 GB, reaching LLIR takes seconds. The
  only hook both versions share is the backend's `add_stages(stages, options, language)`,
  the stage table `triton.compile` runs; Triton 3.8's `add_stages_inspection_hook` edits the
  same table but 3.4 has none. Wrapping the stages changes nothing in what they produce, so
  a variant under the limit compiles to the same code object.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import hashlib
import importlib
import multiprocessing
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mha_ci.checksums.limits import shared_refusal
from mha_ci.checksums.resources import code_object_resources

# A compile request item's "kernels" (the tune payload's compile mode) asking for every kernel spec
# of the item's pass, whichever the inputs would pick: what perf bisect compiles per commit.
EVERY_KERNEL_OF_THE_PASS = "every kernel of the pass"

LLD_CANDIDATES = ("/usr/lib/llvm-19/bin/ld.lld", "/usr/lib/llvm-20/bin/ld.lld", "/opt/rocm/llvm/bin/ld.lld")
MIN_LLD_MAJOR = 19


class ToolchainEnvironmentError(RuntimeError):
    """The toolchain cannot compile a target on this machine (exit 3 of the payload)."""


@dataclass(frozen=True)
class CompileTarget:
    backend: str              # "cuda" | "hip"
    arch: object              # 90 | "gfx942"
    warp_size: int

    @classmethod
    def parse(cls, text: str) -> "CompileTarget":
        backend, arch, warp = text.split(":")
        return cls(backend, int(arch) if backend == "cuda" else arch, int(warp))

    def text(self) -> str:
        return f"{self.backend}:{self.arch}:{self.warp_size}"


@dataclass(frozen=True)
class CompileTask:
    """Everything a compile depends on, in plain data (picklable, hashable into a cache key)."""

    key: str
    module: str               # where the @triton.jit function lives
    qualname: str
    target: CompileTarget
    signature: tuple          # ((arg, type), ...) in parameter order
    constexprs: tuple         # ((arg, value), ...)
    attr_descs: tuple         # ((arg, "D" | "DS" | ""), ...) runtime specialization strings
    num_warps: int
    num_stages: int
    # The arch's shared memory limit, or None: not gated during the compile. Not part of the
    # identity: it decides only whether the compile runs to the end, not what it produces.
    shared_limit: int | None = None
    options: tuple = ()       # ((name, value), ...) further compile options: the Gluon forward's maxnreg
    dialect: str = "triton"   # "gluon": the function is a triton.experimental.gluon kernel

    def identity(self) -> dict:
        """What the code object can depend on (besides sources and toolchain): the cache key part.
        `options` and `dialect` enter only where set, so the keys of plain Triton kernels stay."""
        identity = {"module": self.module, "qualname": self.qualname, "target": self.target.text(),
                    "signature": [list(x) for x in self.signature],
                    "constexprs": [[k, repr(v)] for k, v in self.constexprs],
                    "attrs": [list(x) for x in self.attr_descs], "num_warps": self.num_warps,
                    "num_stages": self.num_stages}
        if self.options:
            identity["options"] = [list(x) for x in self.options]
        if self.dialect != "triton":
            identity["dialect"] = self.dialect
        return identity


@dataclass
class CompileResult:
    key: str
    sha256: str = ""
    shared_bytes: int = 0
    registers: int = 0
    spills: int = 0
    extra: dict = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    refused: str | None = None    # stopped on purpose before code generation: over the shared memory limit


# --------------------------------------------------------------------------- environment
def prepare_environment(targets, triton_cache: str | None = None) -> dict:
    """Set the variables above before Triton reads them; returns what was chosen (provenance)."""
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    os.environ["TRITON_CACHE_DIR"] = triton_cache or temporary_triton_cache()
    chosen = {"TRITON_DISABLE_LINE_INFO": "1"}
    if any(t.backend == "hip" for t in targets) and amd_needs_external_linker():
        chosen["TRITON_HIP_LLD_PATH"] = ensure_lld()
    return chosen


def temporary_triton_cache() -> str:
    """A fresh Triton cache folder, removed when this process exits on any path (an early return,
    an exception, the determinism check's fresh processes): hundreds of compiles a run otherwise
    leave hundreds of megabytes in /tmp. Forked compile workers end with os._exit, which runs no
    exit handlers, so only the process that made the folder removes it."""
    path = tempfile.mkdtemp(prefix="mha-ci-triton-cache-")
    atexit.register(shutil.rmtree, path, True)
    return path


def amd_needs_external_linker() -> bool:
    """Triton >= 3.5 links hsaco in-process (amd.link_hsaco); 3.4 shells out to ld.lld."""
    from triton._C.libtriton import amd  # toolchain only (absent where mha-ci orchestrates)
    return not hasattr(amd, "link_hsaco")


def lld_major(path: str) -> int | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"LLD (\d+)", out)
    return int(match.group(1)) if match else None


def ensure_lld() -> str:
    given = os.environ.get("TRITON_HIP_LLD_PATH")
    candidates = [given] if given else list(LLD_CANDIDATES)
    for path in candidates:
        if path and Path(path).is_file():
            major = lld_major(path)
            if major is not None and major >= MIN_LLD_MAJOR or "/rocm" in path:
                os.environ["TRITON_HIP_LLD_PATH"] = path
                return path
            if given:
                raise ToolchainEnvironmentError(
                    f"TRITON_HIP_LLD_PATH={path} is LLD {major}; this Triton needs LLD >= {MIN_LLD_MAJOR} "
                    "to link AMD code objects (Debian: apt-get install lld-19)")
    raise ToolchainEnvironmentError(
        "this Triton links AMD code objects with an external ld.lld and none >= "
        f"{MIN_LLD_MAJOR} was found (looked at {', '.join(candidates)}); install lld-19 "
        "(apt-get install -y lld-19) or set TRITON_HIP_LLD_PATH")


# --------------------------------------------------------------------------- attributes
class AlignedStandIn:
    """What the runtime's specialization looks at for a tensor argument: a 16-byte-aligned
    address and a storage far below 2 GiB (the attention inputs CI shapes use)."""

    def __init__(self, dtype=None) -> None:
        self.dtype = dtype

    def data_ptr(self) -> int:
        return 1 << 20

    def ptr_range(self) -> int:
        return 1 << 20


def backend_class(target: CompileTarget):
    from triton.backends import backends  # toolchain only (absent where mha-ci orchestrates)
    for entry in backends.values():
        if entry.compiler.supports_target(_gpu_target(target)):
            return entry.compiler
    raise ToolchainEnvironmentError(f"no Triton backend for target {target.text()}")


def specialization_desc(backend, kind: str, value) -> str:
    """The runtime's specialization string for one argument ("D", "DS", ""), from the backend's
    own functions (their names differ between Triton 3.4 and 3.8)."""
    if hasattr(backend, "get_arg_specialization"):            # <= 3.4
        return backend.get_arg_specialization(value, kind, align=True)
    if kind == "tensor":                                       # >= 3.5
        return backend.get_tensor_specialization(value, align=True)
    return backend.get_int_specialization(value, align=True)


def _gpu_target(target: CompileTarget):
    from triton.backends.compiler import GPUTarget  # toolchain only (absent where mha-ci orchestrates)
    return GPUTarget(target.backend, target.arch, target.warp_size)


# --------------------------------------------------------------------------- shared memory gate
class SharedMemoryOverLimit(Exception):
    def __init__(self, shared: int, limit: int) -> None:
        super().__init__(f"shared memory {shared} bytes > limit {limit}")
        self.shared, self.limit = shared, limit


def _gated(stage, limit: int):
    def run(module, metadata: dict):
        shared = metadata.get("shared")
        if isinstance(shared, int) and shared > limit:
            raise SharedMemoryOverLimit(shared, limit)
        return stage(module, metadata)
    return run


@contextlib.contextmanager
def shared_memory_gate(backend, limit: int | None):
    """While active, every compile on `backend` (the class) stops before the first stage that
    starts after shared memory is known and above `limit` (SharedMemoryOverLimit)."""
    if limit is None:
        yield
        return
    own = vars(backend).get("add_stages")
    original = backend.add_stages

    def add_stages(self, stages: dict, options, *rest) -> None:
        original(self, stages, options, *rest)
        for ext, stage in list(stages.items()):
            stages[ext] = _gated(stage, limit)

    backend.add_stages = add_stages
    try:
        yield
    finally:
        if own is None:
            del backend.add_stages
        else:
            backend.add_stages = own


def arch_label(target: CompileTarget) -> str:
    """The arch's name in pipelines/archs.yaml terms: sm90, gfx942."""
    return f"sm{target.arch}" if target.backend == "cuda" else str(target.arch)


# --------------------------------------------------------------------------- compile
def binary_name(target: CompileTarget) -> str:
    return "cubin" if target.backend == "cuda" else "hsaco"


def compile_kernel(task: CompileTask):
    """Triton's CompiledKernel of one task (its `asm` holds every stage: ttir, ttgir, ..., the
    binary); raises what the compile raises, SharedMemoryOverLimit included."""
    import triton  # toolchain only (absent where mha-ci orchestrates)
    from triton.compiler import ASTSource  # toolchain only (absent where mha-ci orchestrates)

    fn = importlib.import_module(task.module)
    for part in task.qualname.split("."):
        fn = getattr(fn, part)
    backend = backend_class(task.target)
    names = list(fn.arg_names)
    attrs = {(names.index(arg),): backend.parse_attr(desc) for arg, desc in task.attr_descs}
    if task.dialect == "gluon":
        from triton.experimental.gluon._runtime import GluonASTSource  # toolchains with Gluon only
        source = GluonASTSource(fn, dict(task.signature), dict(task.constexprs), attrs)
    else:
        source = ASTSource(fn, dict(task.signature), dict(task.constexprs), attrs)
    with shared_memory_gate(backend, task.shared_limit):
        return triton.compile(source, target=_gpu_target(task.target),
                              options={"num_warps": task.num_warps, "num_stages": task.num_stages,
                                       **dict(task.options)})


def compile_task(task: CompileTask, keep_binary: Path | None = None) -> CompileResult:
    """One compile; errors become a result with `error` set (the caller reports them all)."""
    started = time.monotonic()
    try:
        kernel = compile_kernel(task)
        blob = kernel.asm[binary_name(task.target)]
        if keep_binary is not None:
            keep_binary.write_bytes(blob)
        res = code_object_resources(blob, task.target.backend, kernel.metadata.name)
        return CompileResult(task.key, hashlib.sha256(blob).hexdigest(), int(kernel.metadata.shared),
                             res.registers, res.spills, {"scratch_bytes": res.scratch_bytes, **res.extra},
                             round(time.monotonic() - started, 3))
    except SharedMemoryOverLimit as over:
        return CompileResult(task.key, shared_bytes=over.shared, seconds=round(time.monotonic() - started, 3),
                             refused=shared_refusal(over.shared, over.limit, arch_label(task.target)))
    except Exception as exc:  # noqa: BLE001 - every failure is reported per variant
        return CompileResult(task.key, seconds=round(time.monotonic() - started, 3), error=describe_error(exc))


def describe_error(exc: BaseException | None, limit: int = 6000) -> str:
    """The exception and its causes, innermost last: Triton's CompilationError shows only the
    source excerpt; what went wrong is in its __cause__ (e.g. an LLVM or MLIR error)."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}".strip())
        exc = exc.__cause__ or exc.__context__
    text = "\ncaused by ".join(parts)
    return text if len(text) <= limit else text[:limit // 3] + "\n...\n" + text[-2 * limit // 3:]


def _worker_init(triton_cache_root: str) -> None:
    # Each worker compiles into its own Triton cache: no two processes race on one cache entry.
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="w-", dir=triton_cache_root)


def compile_all(tasks: list[CompileTask], jobs: int, progress=None) -> list[CompileResult]:
    """Compile in a process pool (fork: the workers inherit the imported kernel package)."""
    if not tasks:
        return []
    if jobs <= 1 or len(tasks) == 1:
        out = []
        for task in tasks:
            out.append(compile_task(task))
            if progress:
                progress(out[-1])
        return out

    cache_root = os.environ.get("TRITON_CACHE_DIR") or temporary_triton_cache()
    Path(cache_root).mkdir(parents=True, exist_ok=True)
    results: dict[str, CompileResult] = {}
    # Longest first would need estimates; backward kernels are the slow ones, so start them early.
    order = sorted(tasks, key=lambda t: (0 if "bwd" in t.qualname or "backward" in t.key else 1, t.key))
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"),
                                                initializer=_worker_init, initargs=(cache_root,)) as pool:
        futures = {pool.submit(compile_task, task): task for task in order}
        for future in concurrent.futures.as_completed(futures):
            task = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker that died (OOM kill) is a per-variant error
                result = CompileResult(task.key, error=f"compile worker died: {type(exc).__name__}: {exc}")
            results[task.key] = result
            if progress:
                progress(result)
    return [results[t.key] for t in tasks]
