"""The perf workload set of docs/workloads.md, generated from pipelines/workloads.yaml.

Three sources, each shape tagged with where it came from:
  model_shapes  prefill of every model (and TP) at one long sequence, causal and not, per layout;
  bench         a serving scheduler per model and TP: causal prefill at a few lengths (batch fills
                the token budget), one cross-attention case, decode against a few cache lengths;
  test          shapes the kernel tests care about.
Tensor parallelism divides both head counts by TP, only where both divide exactly. The union
is deduplicated by shape key; a shape keeps every source tag and every (model, TP) origin.

Every shape times one pass. The shapes above are forward ones; the sources named under
`backward` in workloads.yaml also give a backward twin (pass `bwd`, key suffix `_bwd`) of each of
their shapes that has more than one query row: training runs the backward of its prefill, and a
decode step has none.

Plus the deterministic pull-request subset (`select_subset`).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Sequence

from mha_ci.perf.buckets import bucket_of
from mha_ci.perf.document import SHAPES_SCHEMA
from mha_ci.perf.shapes import Shape

SOURCES = ("model_shapes", "bench", "test")


@dataclass(frozen=True)
class Origin:
    source: str
    model: str | None = None
    tp: int | None = None


@dataclass
class Workload:
    shape: Shape
    bucket: str
    origins: list[Origin] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.shape.key

    @property
    def tags(self) -> list[str]:
        return [s for s in SOURCES if any(o.source == s for o in self.origins)]

    def to_dict(self) -> dict:
        return {"key": self.key, "shape": self.shape.to_dict(), "bucket": self.bucket, "tags": self.tags,
                "origins": [{"source": o.source, "model": o.model, "tp": o.tp} for o in self.origins]}


def _per_rank(models, tps):
    """(model, tp, hq, hk) for every model and TP where both head counts divide."""
    for model in models:
        for tp in tps:
            if model.hq % tp == 0 and model.hk % tp == 0:
                yield model, tp, model.hq // tp, model.hk // tp


def raw_shapes(spec) -> list[tuple[Shape, Origin]]:
    """Every (shape, origin) before deduplication, in generation order."""
    dtype = spec.dtype
    out: list[tuple[Shape, Origin]] = []
    ms, bench = spec.model_shapes, spec.bench
    for model, tp, hq, hk in _per_rank(spec.models, spec.tensor_parallel):
        def make(layout, batch, sq, sk, causal, window=tuple(model.window)):
            return Shape(layout=layout, batch=batch, hq=hq, hk=hk, sq=sq, sk=sk, dqk=model.dqk, dv=model.dv,
                         causal=causal, window=tuple(window), sink=model.sink, dtype=dtype)

        tag = Origin("model_shapes", model.name, tp)
        for layout in ms.layouts:
            for causal in ms.causal:
                out.append((make(layout, ms.batch, ms.seqlen, ms.seqlen, causal), tag))
        tag = Origin("bench", model.name, tp)
        for s in bench.prefill_seqlens:
            for window in [tuple(model.window)] + [tuple(w) for w in bench.prefill_extra_windows]:
                out.append((make(bench.layout, bench.token_budget // s, s, s, True, window), tag))
        if bench.cross_attention:
            x = bench.cross_attention
            out.append((make(bench.layout, bench.token_budget // x.sq, x.sq, x.sk, False), tag))
        for sk in bench.decode_seqlens_k:
            out.append((make(bench.layout, bench.concurrent_sequences, 1, sk, bench.decode_causal), tag))
    for t in spec.test_shapes:
        for layout in t.layouts:
            out.append((Shape(layout=layout, batch=t.batch, hq=t.hq, hk=t.hk, sq=t.sq, sk=t.sk, dqk=t.dqk,
                              dv=t.dv, causal=t.causal, window=tuple(t.window), sink=t.sink,
                              dropout_p=t.dropout_p, dtype=dtype), Origin("test")))
    return out


def with_backward(raw: list[tuple[Shape, Origin]], sources) -> list[tuple[Shape, Origin]]:
    """`raw` and, after it, the backward twin of every shape of `sources` that is not a decode."""
    twins = [(shape.with_pass("bwd"), origin) for shape, origin in raw
             if origin.source in sources and shape.sq > 1]
    return raw + twins


def generate(spec) -> list[Workload]:
    """The deduplicated workload set, sorted by key (stable across runs and machines)."""
    by_key: dict[str, Workload] = {}
    backward = getattr(spec, "backward", None)
    for shape, origin in with_backward(raw_shapes(spec), backward.sources if backward else ()):
        workload = by_key.get(shape.key)
        if workload is None:
            workload = by_key[shape.key] = Workload(shape=shape, bucket=bucket_of(shape))
        elif workload.shape != shape:
            # Two different problems with one key would make every report ambiguous.
            raise ValueError(f"shape key {shape.key} names two different problems: {workload.shape} and {shape}")
        if origin not in workload.origins:
            workload.origins.append(origin)
    return [by_key[k] for k in sorted(by_key)]


def select_subset(workloads: list[Workload], size: int, always: Sequence[str] = ()) -> list[Workload]:
    """The pull-request subset, deterministic (depends only on the workload set and `size`).

    In order, until `size` is reached (the first three steps may exceed it; coverage wins):
    1. the `always` keys (perf.yaml: the reference shapes of docs/workloads.md);
    2. per (pass, bucket, layout): the cheapest and the most expensive shape by FLOPs, so every
       bucket is timed in both passes, dense and varlen, small and large;
    3. one shape of every source tag not yet present;
    4. the remaining shapes spread evenly over the FLOPs ranking (small to large).
    """
    by_key = {w.key: w for w in workloads}
    chosen: dict[str, Workload] = {}

    def take(w: Workload) -> None:
        chosen.setdefault(w.key, w)

    for key in always:
        if key not in by_key:
            raise KeyError(f"subset.always names {key}, which is not a workload shape")
        take(by_key[key])
    groups: dict[tuple[str, str, str], list[Workload]] = {}
    for w in workloads:
        groups.setdefault((w.shape.pass_, w.bucket, w.shape.layout), []).append(w)
    for group_key in sorted(groups):
        ranked = sorted(groups[group_key], key=lambda w: (w.shape.flops, w.key))
        take(ranked[0])
        take(ranked[-1])
    for source in SOURCES:
        if not any(source in w.tags for w in chosen.values()):
            candidates = sorted((w for w in workloads if source in w.tags), key=lambda w: (w.shape.flops, w.key))
            if candidates:
                take(candidates[len(candidates) // 2])
    rest = sorted((w for w in workloads if w.key not in chosen), key=lambda w: (w.shape.flops, w.key))
    missing = size - len(chosen)
    if missing > 0 and rest:
        step = len(rest) / missing
        for i in range(min(missing, len(rest))):
            take(rest[int(i * step + step / 2)])
    return sorted(chosen.values(), key=lambda w: w.key)


def filter_keys(workloads: list[Workload], patterns: list[str]) -> list[Workload]:
    """Shapes whose key matches any fnmatch pattern (for `--shape` on the command line)."""
    return [w for w in workloads if any(fnmatch.fnmatchcase(w.key, p) for p in patterns)]


def shapes_document(workloads: list[Workload], subset: str) -> dict:
    """What `mha-ci perf shapes` writes and the payload reads (`--shapes`)."""
    return {"schema": SHAPES_SCHEMA, "subset": subset, "count": len(workloads),
            "shapes": [w.to_dict() for w in workloads]}
