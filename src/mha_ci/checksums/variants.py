"""Every kernel variant the configs can select, as compile tasks (payload side).

A variant is one (arch, representative problem, kernel) with exactly the constexprs, argument
specializations and launch options the runtime would use for canonical aligned inputs
(contiguous tensors, 16-byte aligned pointers, head dims that are multiples of 16; see
mha.launch's docstring and `aligned_specialization`). Problems come from a fixed matrix:

Head dims. Every head dim is its own constexpr, so "all head dims" would be 249 variants per
problem. Instead, per bucket of the bucket rule (mha.config.select_bucket), its extremes and its
typical value, restricted to multiples of 16 (what the canonical inputs use; other dims get
different stride specializations at runtime, and their code path, a padded head dim, is
covered by 48, 80, 160 and 224):
  default, Dv <= 16 side:  16        (also the num_stages guard for head dims <= 16)
  small_head_32, 16 < Dv <= 32: 32
  small_head, 32 < Dv <= 64: 48 (padded to 64), 64
  default, 64 < Dv <= 128: 80 (padded to 128), 128 (typical)
  large_head, a head dim > 128: 160 and 224 (padded to 256), 256 (max)
  pe, Dqk > Dv <= 128:     192/128 (the MLA case)
The buckets are *checked*, not assumed: the matrix fails loudly if a bucket of the configs is
reached by no problem of the matrix (a new bucket needs a representative here).

Features. Each feature constexpr is toggled alone against the plain problem for fp16 on the
typical head dims, and all together once, rather than the full product (2^5 per head dim):
  fp16, head dims 64 / 128 / 192x128: plain, causal, window (both sides bounded),
          sink, varlen, causal+window-left+sink+varlen;
  fp16, the other head dims: plain, causal;
  bf16, every head dim: plain, causal (the dtype changes the MMA instructions);
  dropout (bucket dropout_or_fp32): fp16 and bf16, head dims 64 / 128: dropout, causal+dropout;
  fp32 (bucket dropout_or_fp32): head dims 64 / 128: plain, causal;
  large_head_dropout_or_fp32 (the widest tiles of the largest operands): head dims 256 and
          192x128: dropout in fp16 and bf16, fp32 plain.
Each problem gives four kernels (fwd, bwd_preprocess, bwd_dkdv, bwd_dq); identical compile
inputs (the preprocess kernel ignores most flags) are compiled once, under the first key.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import io
import json
import tokenize
from dataclasses import dataclass, fields
from pathlib import Path

from mha_ci.checksums.compile import AlignedStandIn, CompileTarget, CompileTask, backend_class, specialization_desc

TYPICAL_DIMS = ((64, 64), (128, 128), (192, 128))
ALL_DIMS = ((16, 16), (32, 32), (48, 48), (64, 64), (80, 80), (128, 128), (160, 160), (224, 224), (256, 256), (192, 128))
WINDOW = (128, 128)
# (label, Problem fields)
Features = tuple[tuple[str, dict[str, object]], ...]
FEATURES_FULL: Features = (
    ("plain", {}), ("causal", {"causal": True}), ("window", {"window": WINDOW}), ("sink", {"has_sink": True}),
    ("varlen", {"varlen": True}),
    ("causal-window-sink-varlen", {"causal": True, "window": (WINDOW[0], -1), "has_sink": True, "varlen": True}),
)
FEATURES_BASIC: Features = (("plain", {}), ("causal", {"causal": True}))
FEATURES_DROPOUT: Features = (("dropout", {"dropout": True}), ("causal-dropout", {"causal": True, "dropout": True}))
DROPOUT_FP32_DIMS = ((64, 64), (128, 128))
LARGE_DROPOUT_FP32_DIMS = ((256, 256), (192, 128))


@dataclass(frozen=True)
class ProblemPoint:
    dtype: str
    dqk: int
    dv: int
    features: str             # label
    flags: tuple              # ((Problem field, value), ...)

    @property
    def label(self) -> str:
        dims = f"d{self.dqk}" if self.dqk == self.dv else f"d{self.dqk}x{self.dv}"
        return f"{self.dtype}-{dims}-{self.features}"

    def describe(self) -> dict:
        return {"dtype": self.dtype, "dqk": self.dqk, "dv": self.dv, **{k: list(v) if isinstance(v, tuple) else v
                                                                         for k, v in self.flags}}


def problem_matrix() -> list[ProblemPoint]:
    points = []
    for dqk, dv in ALL_DIMS:
        feats = FEATURES_FULL if (dqk, dv) in TYPICAL_DIMS else FEATURES_BASIC
        points += [ProblemPoint("fp16", dqk, dv, label, tuple(sorted(flags.items()))) for label, flags in feats]
    for dqk, dv in ALL_DIMS:
        points += [ProblemPoint("bf16", dqk, dv, label, tuple(sorted(f.items()))) for label, f in FEATURES_BASIC]
    for dtype in ("fp16", "bf16"):
        for dqk, dv in DROPOUT_FP32_DIMS:
            points += [ProblemPoint(dtype, dqk, dv, label, tuple(sorted(f.items()))) for label, f in FEATURES_DROPOUT]
    for dqk, dv in DROPOUT_FP32_DIMS:
        points += [ProblemPoint("fp32", dqk, dv, label, tuple(sorted(f.items()))) for label, f in FEATURES_BASIC]
    for dqk, dv in LARGE_DROPOUT_FP32_DIMS:
        label, flags = FEATURES_DROPOUT[0]
        points += [ProblemPoint(dtype, dqk, dv, label, tuple(sorted(flags.items()))) for dtype in ("fp16", "bf16")]
        points.append(ProblemPoint("fp32", dqk, dv, "plain", ()))
    return points


@dataclass(frozen=True)
class Variant:
    task: CompileTask
    arch: str
    bucket: str
    pass_: str
    kernel: str
    problem: dict
    config: dict
    config_hash: str
    source_hash: str
    inputs_hash: str

    @property
    def key(self) -> str:
        return self.task.key


class VariantError(RuntimeError):
    pass


def _canonical(data) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def code_only(source: str) -> str:
    """Source text without comments and blank lines: the part that can change a code object
    (docstrings stay: they are cheap to keep and rarely edited alone)."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL):
                continue
            out.append(tok.string if tok.type != tokenize.NEWLINE else "\n")
    except (tokenize.TokenError, IndentationError):
        return source
    return " ".join(out)


def _jit_callees(fn) -> list:
    """@triton.jit functions `fn` calls by a global name (or module.attr), one level."""
    from triton.runtime.jit import JITFunction  # toolchain only (absent where mha-ci orchestrates)
    found: list = []
    try:
        tree = ast.parse(fn.src)
    except SyntaxError:
        return found
    scope = fn.fn.__globals__
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Name):
            target = scope.get(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = getattr(scope.get(node.value.id), node.attr, None)
        if isinstance(target, JITFunction) and target is not fn and target not in found:
            found.append(target)
    return found


_SOURCE_HASHES: dict[int, str] = {}


def source_hash(fn) -> str:
    """Memoized per function object (the enumeration asks once per variant)."""
    if id(fn) not in _SOURCE_HASHES:
        _SOURCE_HASHES[id(fn)] = _source_hash(fn)
    return _SOURCE_HASHES[id(fn)]


def _source_hash(fn) -> str:
    """Hash of the kernel and, transitively, every jit function it calls, comments dropped: what
    `explain` uses to say "the kernel source changed" (line moves and comments do not count)."""
    seen, todo, digest = [], [fn], hashlib.sha256()
    while todo:
        current = todo.pop(0)
        if current in seen:
            continue
        seen.append(current)
        digest.update(f"{current.fn.__module__}.{current.fn.__qualname__}\0".encode())
        digest.update(code_only(current.src).encode() + b"\0")
        todo += _jit_callees(current)
    return digest.hexdigest()


def _problem(launch, point: ProblemPoint):
    names = {f.name for f in fields(launch.Problem)}
    kwargs = {"dtype": point.dtype, "dqk": point.dqk, "dv": point.dv}
    kwargs.update({k: v for k, v in point.flags if k in names})
    unknown = [k for k, _ in point.flags if k not in names]
    if unknown:
        raise VariantError(f"mha.launch.Problem has no field(s) {unknown}; the variant matrix needs updating")
    return launch.Problem(**kwargs)


def _attr_descs(spec, fn, backend, aligned: dict) -> tuple:
    """Specialization string per argument, as the runtime computes it for canonical inputs."""
    params = {p.name: p for p in fn.params}
    out = []
    for name in fn.arg_names:
        ty = spec.signature.get(name)
        if ty is None:
            raise VariantError(f"{spec.name}: signature lacks argument {name!r}")
        param = params[name]
        if (ty == "constexpr" or param.do_not_specialize or ty.startswith(("fp", "bf", "tensordesc"))
                or ty == "u1"):
            continue      # the runtime attaches no attribute to these
        how = aligned.get(name, "none")
        value: AlignedStandIn | int       # what a canonical input passes: a tensor or an integer
        if ty.startswith("*"):
            value, kind = AlignedStandIn(), "tensor"
        else:
            value, kind = (1024 if how == "aligned16" else 1000), "int"
        align = not getattr(param, "do_not_specialize_on_alignment", False)
        desc = specialization_desc(backend, kind, value) if align else ""
        out.append((name, desc))
    return tuple(out)


def task_for_spec(launch, spec, key: str, target: CompileTarget, backend=None,
                  shared_limit: int | None = None) -> CompileTask:
    """The compile task of one KernelSpec: signature in parameter order, constexprs, the
    runtime's argument attributes for canonical inputs, num_warps / num_stages; with
    `shared_limit`, the compile stops before code generation above it."""
    fn = spec.fn
    backend = backend or backend_class(target)
    aligned = launch.aligned_specialization(spec) if hasattr(launch, "aligned_specialization") else {}
    signature = tuple((arg, spec.signature[arg]) for arg in fn.arg_names)
    constexprs = tuple((k, spec.constexprs[k]) for k in fn.arg_names if k in spec.constexprs)
    # A Gluon kernel (triton.experimental.gluon) compiles from its own source class.
    dialect = "gluon" if type(fn).__name__ == "GluonJITFunction" else "triton"
    return CompileTask(key=key, module=fn.fn.__module__, qualname=fn.fn.__qualname__, target=target,
                       signature=signature, constexprs=constexprs,
                       attr_descs=_attr_descs(spec, fn, backend, aligned),
                       num_warps=int(spec.num_warps), num_stages=int(spec.num_stages), shared_limit=shared_limit,
                       options=tuple(sorted(getattr(spec, "options", {}).items())), dialect=dialect)


def identity_key(task: CompileTask) -> str:
    """Compile inputs without the variant's name: equal for two tasks that compile the same."""
    return _canonical(task.identity())


def config_section(config_json: dict, pass_: str, bucket: str) -> dict:
    base = bucket.split("+", 1)[0]
    section = config_json.get(pass_, {}).get(base)
    return dict(section) if isinstance(section, dict) else {}


def enumerate_variants(arch: str, target: CompileTarget, package: str = "mha",
                       key_filter=None, shared_limit: int | None = None) -> list[Variant]:
    launch = importlib.import_module(f"{package}.launch")
    config_mod = importlib.import_module(f"{package}.config")
    config_json = json.loads(Path(config_mod.config_path(arch)).read_text())
    backend = backend_class(target)
    variants: dict[str, Variant] = {}
    seen_inputs: dict[str, str] = {}
    buckets_seen: set[tuple[str, str]] = set()
    for point in problem_matrix():
        specs = launch.kernel_specs(_problem(launch, point), arch)
        for name, spec in specs.items():
            fn = spec.fn
            key = f"{arch}/{spec.pass_}/{spec.bucket}/{name}/{point.label}"
            task = task_for_spec(launch, spec, key, target, backend, shared_limit)
            buckets_seen.add((spec.pass_, spec.bucket))
            inputs = identity_key(task)
            if inputs in seen_inputs:
                continue                # same compile as an earlier key: one code object
            seen_inputs[inputs] = key
            if key_filter is not None and not key_filter(key):
                continue
            section = config_section(config_json, spec.pass_, spec.bucket)
            variants[key] = Variant(task=task, arch=arch, bucket=spec.bucket, pass_=spec.pass_, kernel=name,
                                    problem=point.describe(), config=section,
                                    config_hash=hashlib.sha256(_canonical(section).encode()).hexdigest()[:16],
                                    source_hash=source_hash(fn)[:16],
                                    inputs_hash=hashlib.sha256(inputs.encode()).hexdigest()[:16])
    _check_bucket_coverage(config_json, buckets_seen, arch)
    return list(variants.values())


def closest_keys(pattern: str, keys: list[str], count: int) -> list[str]:
    """The keys most like `pattern`, a substring meant to match some of them: each key is scored
    by its best run of whole segments ("fwd/fp16-d64", "fp16-d64-causal"), so a short pattern is
    not judged against a long key."""
    matcher = difflib.SequenceMatcher(b=pattern)     # the pattern's index is built once
    ratios: dict[str, float] = {}                      # keys share most of their runs

    def ratio(run: str) -> float:
        if run not in ratios:
            matcher.set_seq1(run)
            ratios[run] = matcher.ratio()
        return ratios[run]

    def score(key: str) -> float:
        parts = key.split("/")
        return max(ratio("/".join(parts[i:j])) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1))

    return sorted(keys, key=lambda k: (-score(k), k))[:count]


def _check_bucket_coverage(config_json: dict, seen: set, arch: str) -> None:
    missing = [f"{pass_}.{bucket}" for pass_, section in config_json.items() if isinstance(section, dict)
               for bucket in section if isinstance(section[bucket], dict) and (pass_, bucket) not in seen]
    if missing:
        raise VariantError(f"{arch}: config buckets {missing} are selected by no problem of the checksum matrix "
                           "(mha_ci.checksums.variants.problem_matrix): add a representative problem")
