"""What to tune: the buckets and their shapes, from the workload set or from a compare report.

A tune run tunes one config section (`--pass forward|backward`); its targets are the workload
shapes of that pass only (a `fwd` shape runs the forward kernel, a `bwd` one the backward step,
mha_ci.perf.shapes), each in the bucket of that section (mha_ci.perf.buckets.bucket_of).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mha.config import BUCKETS, GLUON, UNMASKED, WS, gluon_lengths_ok, gluon_selected, gluon_serves
from mha_ci.errors import ConfigError
from mha_ci.perf.buckets import bucket_of
from mha_ci.perf.shapes import Shape


@dataclass
class BucketTarget:
    bucket: str
    shapes: list[dict] = field(default_factory=list)     # workload dicts: key, shape, bucket, tags
    regressed: list[str] = field(default_factory=list)   # keys the report called regressions
    report_rows: dict = field(default_factory=dict)      # key -> the report's row (baseline/candidate us)


def shape_of(entry: dict) -> Shape:
    return Shape.from_dict(entry["shape"])


def read_report(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--from-report {path}: cannot read it: {exc}", key="--from-report") from None
    if doc.get("schema") != "mha-ci.perf-compare/1":
        raise ConfigError(f"--from-report {path}: not a mha-ci.perf-compare/1 file", key="--from-report")
    return doc


def of_pass(entry: dict, pass_: str) -> bool:
    """Whether a workload entry or report row times the kernels of config section `pass_`."""
    return shape_of(entry).config_pass == pass_


def choose(workloads: list[dict], buckets: list[str] | None, report: dict | None,
           pass_: str = "forward") -> list[BucketTarget]:
    """Shapes of config section `pass_` only (the others run kernels this run does not change).
    Buckets named (or, with a report, those with regressions; else every bucket with shapes),
    each with all of the bucket's workload shapes; with a report, its regressed shapes are named
    (`regressed`: what the search tries to recover) and added if the workload set lacks them.
    Every shape of the bucket is timed because one config serves them all: a candidate chosen on
    the regressed shapes alone recovered them on the H200 and made the others of its bucket up to
    1.7x slower (docs/tune.md). Shapes are mapped to buckets by the bucket rule (perf/buckets.py),
    not by the report's label."""
    for name in buckets or []:
        if name not in BUCKETS:
            raise ConfigError(f"unknown bucket {name!r}; known: {', '.join(BUCKETS)}", key="--bucket")
    workloads = [w for w in workloads if of_pass(w, pass_)]
    by_key = {w["key"]: w for w in workloads}
    targets: dict[str, BucketTarget] = {}
    if report is not None:
        for row in report.get("shapes", []):
            if row.get("status") != "regression":
                continue
            entry = by_key.get(row["key"]) or {"key": row["key"], "shape": row["shape"], "tags": row.get("tags", [])}
            if not of_pass(entry, pass_):
                continue
            bucket = bucket_of(shape_of(entry))
            if buckets and bucket not in buckets:
                continue
            target = targets.setdefault(bucket, BucketTarget(bucket))
            target.shapes.append({**entry, "bucket": bucket})
            target.regressed.append(row["key"])
            target.report_rows[row["key"]] = row
        for entry in workloads:
            bucket = bucket_of(shape_of(entry))
            found = targets.get(bucket)
            if found is not None and entry["key"] not in found.regressed:
                found.shapes.append({**entry, "bucket": bucket})
    else:
        for entry in workloads:
            bucket = bucket_of(shape_of(entry))
            if buckets and bucket not in buckets:
                continue
            targets.setdefault(bucket, BucketTarget(bucket)).shapes.append({**entry, "bucket": bucket})
    for name in buckets or []:
        targets.setdefault(name, BucketTarget(name))
    return [targets[b] for b in BUCKETS if b in targets]


def _has_band(shape: Shape) -> bool:
    return shape.causal or max(shape.window) >= 0


def _runs_gluon(shape: Shape, arch: str) -> bool:
    window = (shape.window[0], shape.window[1])
    return (gluon_serves(shape.config_pass, arch, shape.dtype, shape.dqk, shape.dv, window, shape.sink,
                         shape.dropout_p > 0, shape.layout == "varlen")
            and gluon_lengths_ok(shape.sq, shape.sk, shape.causal or shape.window[1] == 0))


def own_config_shapes(target: BucketTarget, bucket_cfg: dict, arch: str = "", triton_version: str | None = None
                      ) -> BucketTarget:
    """The target restricted to the shapes the bucket's own config serves, which a tune run
    changes. A forward bucket's `unmasked` config (mha.config) serves the problems without a
    causal or window band, and its `gluon` or `ws` config, where it names the toolchain's Triton,
    the problems the Gluon kernels take (mha.config.gluon_serves and gluon_lengths_ok; the
    warp-specialized backward takes the same): a tune run leaves them as they are, so their
    shapes are not judged. Fails closed when no shape is left: the run would judge nothing."""
    gluon = (any(gluon_selected(bucket_cfg.get(key), triton_version) for key in (GLUON, WS))
             if triton_version else False)
    if UNMASKED not in bucket_cfg and not gluon:
        return target
    kept = [e for e in target.shapes
            if (UNMASKED not in bucket_cfg or _has_band(shape_of(e))) and not (gluon and _runs_gluon(shape_of(e), arch))]
    if target.shapes and not kept:
        raise ConfigError(f"bucket {target.bucket!r}: every shape chosen runs the bucket's `unmasked`, `gluon` or "
                          f"`ws` config, which tune does not change; nothing left to judge")
    keys = {e["key"] for e in kept}
    return BucketTarget(target.bucket, kept, [k for k in target.regressed if k in keys],
                        {k: v for k, v in target.report_rows.items() if k in keys})


def compile_problem(target: BucketTarget, pass_: str) -> dict:
    """The one problem each candidate is compiled for: the bucket's most demanding, i.e. its
    shapes' largest head dims with every feature its shapes use (a bounded window, a sink, varlen
    and causal add registers). Without shapes (a named bucket no workload reaches): its typical
    problem."""
    shapes = [shape_of(e) for e in target.shapes]
    if not shapes:
        return dict(TYPICAL[target.bucket])
    widest = max(shapes, key=lambda s: (s.dqk + s.dv, s.dqk))
    dtype = "fp32" if any(s.dtype == "fp32" for s in shapes) else widest.dtype
    return {"dtype": dtype, "dqk": widest.dqk, "dv": widest.dv, "causal": any(s.causal for s in shapes),
            "window": [128 if any(s.window[0] >= 0 for s in shapes) else -1,
                       128 if any(s.window[1] > 0 for s in shapes) else -1],
            "has_sink": any(s.sink for s in shapes), "varlen": any(s.layout == "varlen" for s in shapes),
            "dropout": any(s.dropout_p > 0 for s in shapes)}


# Typical problem per bucket (the checksums matrix's typical head dims), for buckets without shapes.
TYPICAL = {
    "default": {"dtype": "bf16", "dqk": 128, "dv": 128, "causal": True},
    "small_head_32": {"dtype": "bf16", "dqk": 32, "dv": 32, "causal": True},
    "small_head": {"dtype": "bf16", "dqk": 64, "dv": 64, "causal": True},
    "large_head": {"dtype": "bf16", "dqk": 256, "dv": 256, "causal": True},
    "pe": {"dtype": "bf16", "dqk": 192, "dv": 128, "causal": True},
    "dropout_or_fp32": {"dtype": "bf16", "dqk": 128, "dv": 128, "causal": True, "dropout": True},
    "large_head_dropout_or_fp32": {"dtype": "bf16", "dqk": 256, "dv": 256, "dropout": True},
}
