"""Checksums payload: compile every kernel variant ahead of time and record its code object.

    python -m mha_ci.payloads.checksums compute --target sm90=cuda:90:32 --target gfx950=hip:gfx950:64 \
        --out code_objects/triton-3.4.json [--cache-dir DIR] [--jobs N] [--determinism-sample 3] \
        [--lock-sha256 HEX] [--package mha] [--only SUBSTRING] [--shared-limit sm90=232448 ...] \
        [--stored perf_baselines/code_objects/triton-3.4.json] [--recheck SHARE] [--seed N] [--slice K/N]
    python -m mha_ci.payloads.checksums sample --target ... --keys K1,K2 --out FILE   (internal)

Runs inside the toolchain environment (stdlib + triton + the kernel package). `compute` writes
an mha-ci.codeobj/1 file (plus run details: determinism, errors, refused, stats) and exits
0 all variants compiled and the determinism sample agreed, 1 a variant failed to compile, was
refused over its arch's shared memory limit (`--shared-limit`: the compile stops before code
generation, mha_ci.checksums.compile) or the sample disagreed, 2 `--only` matches no variant
(the file then holds no records and the closest keys in its stats), 3 the environment cannot
compile a target (pins, missing ld.lld); 1 also when a compile cache entry disagrees with a
fresh compile of its variant.

`--slice K/N` compiles only the variants of slice K of N (mha_ci.checksums.slices: by a hash of
the key), what one shard of the sharded checksums job owns; with `--only`, the variants of both.

Determinism: a few variants (one per arch first, `--determinism-sample`, drawn at random each
run) are compiled again in two fresh processes, each with its own empty Triton cache and no use
of our cache; all three hashes (the run's record and both fresh compiles) must agree.

The compile cache is not trusted (it may be restored from another run's upload or shared
between clones, mha_ci.checksums.cache): some of its hits are compiled again in the main run and
compared with their entries, and a hit in the determinism sample is compared with the two fresh
compiles. Compiled again are
- every hit that claims the stored record's code object although the variant's kernel source,
  config or compile inputs differ from that record's (the record's source_hash, config_hash,
  inputs_hash), or the stored file was made with another Triton: the claim a forged entry
  would make to hide a change. Honest ones are the "same code object; ... moved" notes of
  verify, until `update` refreshes those records;
- with `--only`, every other hit too (a narrowed run is small; its verdict then rests on no
  cache entry);
- else a share of the other hits (`--recheck`, default RECHECK_SHARE), drawn at random.
With H other hits, k = ceil(share * H) of them drawn and a determinism sample of s of the n
records, one forged entry among them is caught with probability k/H + (1 - k/H) * s/n (at
least 5 % per run by default, 5.5 % for the 666 variants of a toolchain; a later run draws
again). A hit that disagrees fails the run, its entry is replaced by the fresh result, and the
fresh result is the variant's record. One seed (`--seed`, else drawn; recorded in the output)
makes both draws, so a run can be repeated exactly.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"   # before anything imports triton (docs/facts.md: the line-info path leak)

from mha_ci.checksums.cache import CompileCache, cache_key, module_sources_digest
from mha_ci.files import tree_digest
from mha_ci.checksums.compile import (CompileTarget, ToolchainEnvironmentError, compile_all,
                                      compile_task, prepare_environment)
from mha_ci.checksums.records import CodeObjectFile, CodeObjectRecord, RecordFileError, dump, error_summary, load
from mha_ci.checksums.slices import Slice, parse as parse_slice
from mha_ci.checksums.variants import closest_keys, enumerate_variants
from mha_ci.files import write_atomic
from mha_ci.payloads import EXIT_ENVIRONMENT, EXIT_GATE_FAILED, EXIT_OK, EXIT_USAGE, out_path, pincheck, run_guarded

RECHECK_SHARE = 0.05
# What a compile cache entry says about its variant; a fresh compile must say the same.
ENTRY_FIELDS = ("sha256", "shared_bytes", "registers", "spills", "extra", "error", "refused")
MAX_FAILURES_SHOWN = 5
CLOSEST_SHOWN = 3


def _targets(values: list[str]) -> list[tuple[str, CompileTarget]]:
    out = []
    for value in values:
        arch, _, spec = value.partition("=")
        out.append((arch, CompileTarget.parse(spec)))
    return out


def _log(message: str) -> None:
    print(f"checksums: {message}", flush=True)


def _toolchain_info(args, package_dir: Path) -> dict:
    spec = json.loads(os.environ.get("MHA_CI_PINS", '{"toolchain": "unnamed", "pins": {}}'))
    found = pincheck.versions(dict(spec.get("pins", {})))
    info = {"name": spec.get("toolchain", "unnamed"), "lock_sha256": args.lock_sha256 or None,
            **{k: v for k, v in found.items() if k in ("triton", "torch", "python")}}
    return info


def _shared_limits(values: list[str]) -> dict[str, int]:
    return {arch: int(limit) for arch, _, limit in (value.partition("=") for value in values)}


def _variants(targets, package: str, only: str | None, shared_limits: dict[str, int] | None = None,
              slice_: Slice | None = None):
    def key_filter(key: str) -> bool:
        return (not only or only in key) and (slice_ is None or slice_.holds(key))
    out = []
    for arch, target in targets:
        out += enumerate_variants(arch, target, package, key_filter if only or slice_ else None,
                                  (shared_limits or {}).get(arch))
    return out


def _no_match(args, targets, toolchain: dict) -> int:
    """`--only` matched nothing: say so with the closest keys, write a file without records
    (where the orchestrating side reads them) and exit 2."""
    closest = closest_keys(args.only, [v.key for v in _variants(targets, args.package, None)], CLOSEST_SHOWN)
    print(f"checksums: no variant matches --only {args.only!r}"
          + (f"; closest keys: {', '.join(closest)}" if closest else ""), file=sys.stderr, flush=True)
    dump(CodeObjectFile(toolchain, (), None, (), {"variants": 0, "only": args.only, "closest": closest}),
         out_path(args.out))
    return EXIT_USAGE


def _package_dir(package: str) -> Path:
    package_file = importlib.import_module(package).__file__
    if package_file is None:
        raise RuntimeError(f"{package} is a namespace package: no sources to hash and compile")
    return Path(package_file).parent


def compute(args) -> int:
    cache = CompileCache(Path(args.cache_dir) if args.cache_dir else None)
    with cache.in_use():          # `mha-ci cache prune` leaves the folder alone meanwhile
        return _compute(args, cache)


def _compute(args, cache: CompileCache) -> int:
    # 1. the environment: pins, one Triton cache, the targets' compilers
    pincheck.enforce()
    started = time.monotonic()
    targets = _targets(args.target)
    try:
        chosen = prepare_environment([t for _, t in targets])
    except ToolchainEnvironmentError as exc:
        print(f"checksums: environment error: {exc}", file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT
    import triton  # toolchain only: after the pin check
    package_dir = _package_dir(args.package)
    toolchain = _toolchain_info(args, package_dir)
    toolchain["triton"] = triton.__version__
    _log(f"triton {triton.__version__}, {', '.join(f'{k}={v}' for k, v in chosen.items())}")

    # 2. the variants, and the cache key of each
    slice_ = parse_slice(args.slice) if args.slice else None
    variants = _variants(targets, args.package, args.only, _shared_limits(args.shared_limit), slice_)
    enumerated = time.monotonic()
    _log(f"{len(variants)} variants for {', '.join(a for a, _ in targets)}{f', slice {slice_}' if slice_ else ''} "
         f"(enumerated in {enumerated - started:.1f} s)")
    if args.only and not variants:
        return _no_match(args, targets, toolchain)
    sources = tree_digest(package_dir)
    key_toolchain = {"name": toolchain["name"], "lock": toolchain["lock_sha256"], "triton": triton.__version__,
                     "env": chosen}
    # The config enters a compile only through the variant's identity (constexprs, num_warps,
    # num_stages, kernel), so the key names the variant's bucket section, not the whole file: a
    # change to one bucket (or to a note) misses only the variants of that bucket.
    by_module: dict[str, str] = {}
    for v in variants:
        if v.task.module not in by_module:
            by_module[v.task.module] = module_sources_digest(package_dir, v.task.module)
    keys = {v.key: cache_key(sources=by_module[v.task.module], config=v.config_hash, identity=v.task.identity(),
                             toolchain=key_toolchain) for v in variants}

    # 3. compile what the cache does not hold, and again some of what it holds
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    results, todo, hits = {}, [], {}
    for variant in variants:
        hit = cache.get(keys[variant.key])
        if hit is not None:
            results[variant.key] = hits[variant.key] = hit
        else:
            todo.append(variant.task)
    share = args.recheck if args.recheck is not None else (1.0 if args.only else RECHECK_SHARE)
    stored = _stored_file(args.stored)
    claims = unchanged_claims(variants, hits, stored.by_key() if stored else {},
                              triton_moved=stored is not None and stored.toolchain.get("triton") != triton.__version__)
    rechecked = pick_rechecks(sorted(hits), claims, share, rng)
    by_key = {v.key: v for v in variants}
    mismatches: list[dict] = []
    _log(f"{len(hits)} from cache ({len(rechecked)} of them compiled again to check it: {len(claims)} claiming the "
         f"stored code object for changed inputs, {share:.0%} of the rest; seed {seed}), {len(todo)} to compile on "
         f"{args.jobs} processes")
    _compile(todo + [by_key[k].task for k in rechecked], args.jobs, results, cache, keys, enumerated,
             rechecked=set(rechecked), mismatches=mismatches)
    compiled_at = time.monotonic()

    # 4. records, and the determinism sample
    records, errors, refused = _records(variants, results)
    # no record (every variant failed or was refused): nothing of this run to compile again
    determinism = (check_determinism(args, records, variants, rng) if args.determinism_sample > 0 and records
                   else None)
    if determinism is not None:
        determinism["seed"] = seed
        # a record from an unchecked hit that both fresh compiles contradict alike: the entry, not the compiler
        for m in list(determinism["mismatches"]):
            if (m["key"] in hits and m["key"] not in rechecked and m["fresh_1"] == m["fresh_2"]
                    and not str(m["fresh_1"]).startswith("error")):
                determinism["mismatches"].remove(m)
                mismatches.append({"key": m["key"], "cached": m["record"], "fresh": m["fresh_1"],
                                   "found_by": "determinism sample"})
                cache.evict(keys[m["key"]])
                _log(f"COMPILE CACHE: {m['key']}: the cached entry says sha {str(m['record'])[:16]}, two fresh "
                     f"compiles give {str(m['fresh_1'])[:16]}: entry removed")
        determinism["agree"] = not determinism["mismatches"] and not determinism["problems"]
    if determinism is not None and tree_digest(package_dir) != sources:
        # the fresh compiles saw other sources than the main run: their disagreement is an edit
        # made during the run, not a nondeterministic compiler
        determinism["agree"] = False
        determinism["problems"].append(f"the kernel package {package_dir} changed during the run; run again")
    cache_check = {"seed": seed, "share": share, "hits": len(hits), "claims": len(claims),
                   "rechecked": rechecked, "mismatches": mismatches, "agree": not mismatches}

    # 5. the file, and the exit
    stats = {"variants": len(variants), **({"slice": str(slice_)} if slice_ else {}), "cached": len(variants) - len(todo), "compiled": len(todo),
             "rechecked": len(rechecked), "seed": seed, "jobs": args.jobs, "enumerate_s": round(enumerated - started, 2),
             "compile_s": round(compiled_at - enumerated, 2),
             "determinism_s": round(time.monotonic() - compiled_at, 2),
             "total_s": round(time.monotonic() - started, 2)}
    dump(CodeObjectFile(toolchain, tuple(records), determinism, tuple(errors), stats, tuple(refused), cache_check),
         out_path(args.out))
    _log(f"{len(records)} records, {len(errors)} compile errors, {len(refused)} refused over the shared memory "
         f"limit, wrote {out_path(args.out)} ({stats['total_s']:.1f} s: {stats['cached']} cached, "
         f"{stats['compiled']} compiled, {stats['rechecked']} cached compiled again)")
    if errors or refused or mismatches:
        return EXIT_GATE_FAILED
    if determinism is not None and not determinism["agree"]:
        return EXIT_GATE_FAILED
    return EXIT_OK


def _compile(todo: list, jobs: int, results: dict[str, dict], cache, keys: dict[str, str], since: float, *,
             rechecked: Collection[str] = (), mismatches: list[dict] | None = None) -> None:
    """Compile `todo` on `jobs` processes into `results` (key -> entry), caching each entry as it
    lands. A key in `rechecked` is a cache hit compiled again: when the fresh entry differs from
    the cached one, the fresh one replaces it (in `results` and in the cache) and the difference
    goes to `mismatches`."""
    done = [0]
    failed: list[str] = []
    last = [time.monotonic()]

    def entry_of(result) -> dict:
        return {"sha256": result.sha256, "shared_bytes": result.shared_bytes, "registers": result.registers,
                "spills": result.spills, "extra": result.extra, "seconds": result.seconds, "error": result.error,
                "refused": result.refused}

    def settle(result) -> None:
        fresh = entry_of(result)
        if result.key in rechecked:
            cached = results[result.key]
            if all(cached.get(f) == fresh.get(f) for f in ENTRY_FIELDS):
                return
            if mismatches is not None:
                mismatches.append({"key": result.key, "cached": cached.get("sha256"),
                                   "fresh": fresh["sha256"] or f"error: {fresh['error'] or fresh['refused']}",
                                   "found_by": "compiled again"})
            _log(f"COMPILE CACHE: {result.key}: the cached entry says sha {str(cached.get('sha256'))[:16]}, a fresh "
                 f"compile gives {(fresh['sha256'] or 'no code object')[:16]}: entry replaced")
            cache.evict(keys[result.key])       # put() keeps no failure: the forged entry must not stay
        # cached as each compile lands: an interrupted run keeps what it finished
        results[result.key] = fresh
        cache.put(keys[result.key], fresh)
        if result.refused:
            _log(f"REFUSED {result.key}: {result.refused} (stopped before code generation, "
                 f"{result.seconds:.1f} s)")
        if result.error:
            failed.append(result.key)
            if len(failed) <= MAX_FAILURES_SHOWN:      # the rest are counted by cause at the end
                _log(f"FAILED {result.key}: {error_summary(result.error)[:300]}")

    def progress(result) -> None:
        settle(result)
        done[0] += 1
        if time.monotonic() - last[0] > 15 or done[0] == len(todo):
            last[0] = time.monotonic()
            _log(f"compiled {done[0]}/{len(todo)} ({last[0] - since:.0f} s)")

    compile_all(todo, jobs, progress)


def _records(variants: list, results: dict[str, dict]) -> tuple[list, list[dict], list[dict]]:
    """The code-object record of each variant that compiled, {key, error} of each that did not
    (logged by cause), and {key, arch, value, limit} of each refused over the shared memory limit."""
    records, errors, refused = [], [], []
    for variant in variants:
        entry = results[variant.key]
        if entry.get("refused"):
            refused.append({"key": variant.key, "arch": variant.arch, "value": entry["shared_bytes"],
                            "limit": variant.task.shared_limit})
            continue
        if entry.get("error"):
            errors.append({"key": variant.key, "error": entry["error"]})
            continue
        records.append(CodeObjectRecord(
            key=variant.key, arch=variant.arch, bucket=variant.bucket, sha256=entry["sha256"],
            shared_bytes=entry["shared_bytes"], registers=entry["registers"], spills=entry["spills"],
            pass_=variant.pass_, kernel=variant.kernel, num_warps=variant.task.num_warps,
            num_stages=variant.task.num_stages, config=variant.config, config_hash=variant.config_hash,
            source_hash=variant.source_hash, inputs_hash=variant.inputs_hash, problem=variant.problem, extra=entry.get("extra", {})))
    if errors:
        by_cause: dict[str, list[str]] = {}
        for error in errors:
            by_cause.setdefault(error_summary(error["error"])[:200], []).append(error["key"])
        for cause, keys in sorted(by_cause.items(), key=lambda item: -len(item[1])):
            _log(f"{len(keys)} variants failed to compile with: {cause} (e.g. {keys[0]})")
    return records, errors, refused


def pick_sample(records, count: int, rng: random.Random) -> list[str]:
    """One variant per arch first, then more, each drawn at random: over runs every variant
    gets compiled twice afresh, and no cache entry can count on staying out of the sample."""
    by_arch: dict[str, list] = {}
    for record in sorted(records, key=lambda r: (r.arch, r.key)):
        by_arch.setdefault(record.arch, []).append(record.key)
    for keys in by_arch.values():
        rng.shuffle(keys)
    picked: list[str] = []
    round_ = 0
    while len(picked) < count and any(len(keys) > round_ for keys in by_arch.values()):
        for keys in by_arch.values():
            if len(keys) > round_ and len(picked) < count:
                picked.append(keys[round_])
        round_ += 1
    return picked


def pick_rechecks(hits: list[str], claims: set[str], share: float, rng: random.Random) -> list[str]:
    """The cache hits to compile again: every claim (unchanged_claims), and ceil(share * rest)
    of the other hits drawn at random."""
    rest = sorted(set(hits) - claims)
    drawn = rng.sample(rest, min(len(rest), math.ceil(share * len(rest))))
    return sorted(claims & set(hits)) + sorted(drawn)


def unchanged_claims(variants, hits: dict[str, dict], stored: dict[str, CodeObjectRecord], *,
                     triton_moved: bool = False) -> set[str]:
    """Hits whose entry gives the stored record's code object while the variant's kernel source,
    config or compile inputs differ from the record's, or the records were made with another
    Triton (`triton_moved`): what a forged entry hiding a change says."""
    out = set()
    for variant in variants:
        entry, record = hits.get(variant.key), stored.get(variant.key)
        if entry is None or record is None or entry.get("sha256") != record.sha256:
            continue
        if triton_moved or ((variant.source_hash, variant.config_hash, variant.inputs_hash)
                            != (record.source_hash, record.config_hash, record.inputs_hash)):
            out.add(variant.key)
    return out


def _stored_file(path: str | None) -> CodeObjectFile | None:
    """The stored records (`--stored`, relative to the checkout); the orchestrating side has
    refused a broken file before the payload started."""
    if not path or not Path(path).is_file():
        return None
    try:
        return load(Path(path))
    except RecordFileError:
        return None


def check_determinism(args, records, variants, rng: random.Random) -> dict:
    sample = pick_sample(records, args.determinism_sample, rng)
    archs = {v.arch for v in variants if v.key in sample}
    targets = [t for t in args.target if t.split("=", 1)[0] in archs]
    _log(f"determinism: compiling {len(sample)} variants in two fresh processes")
    runs: list[dict] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mha-ci-determinism-") as tmp:
        procs = []
        for i in range(2):
            out = Path(tmp) / f"run{i}.json"
            env = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_DIR"}
            cmd = [sys.executable, "-m", "mha_ci.payloads.checksums", "sample", "--package", args.package,
                   "--keys", ",".join(sample), "--out", str(out), *[x for t in targets for x in ("--target", t)]]
            procs.append((subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
                          out))
        for proc, out in procs:
            log = proc.communicate()[0]
            if proc.returncode != 0 or not out.is_file():
                problems.append(f"fresh compile process exited {proc.returncode}: {log.strip()[-800:]}")
                runs.append({})
            else:
                runs.append(json.loads(out.read_text()))
    recorded = {r.key: r.sha256 for r in records}
    mismatches = []
    for key in sample:
        seen = [recorded.get(key)] + [run.get(key) for run in runs]
        if len(set(seen)) != 1:
            mismatches.append({"key": key, "record": seen[0], "fresh_1": seen[1], "fresh_2": seen[2]})
    agree = not mismatches and not problems
    _log("determinism: " + ("identical hashes" if agree else f"DISAGREE {mismatches} {problems}"))
    return {"sample": sample, "agree": agree, "mismatches": mismatches, "problems": problems}


def sample(args) -> int:
    targets = _targets(args.target)
    prepare_environment([t for _, t in targets])        # a fresh Triton cache of its own
    wanted = set(args.keys.split(","))
    hashes = {}
    for variant in _variants(targets, args.package, None):
        if variant.key in wanted:
            result = compile_task(variant.task)
            hashes[variant.key] = result.sha256 or f"error: {result.error}"
    write_atomic(Path(args.out), json.dumps(hashes, indent=1, sort_keys=True))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.payloads.checksums")
    sub = parser.add_subparsers(dest="mode", required=True)
    for name in ("compute", "sample"):
        p = sub.add_parser(name)
        p.add_argument("--target", action="append", required=True, help="ARCH=BACKEND:ARCH:WARP, repeatable")
        p.add_argument("--out", required=True, help="output file (relative to $MHA_CI_OUT)")
        p.add_argument("--package", default="mha", help="the kernel package (tests use a toy one)")
    compute_p = sub.choices["compute"]
    compute_p.add_argument("--cache-dir", default=None)
    compute_p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    compute_p.add_argument("--determinism-sample", type=int, default=3)
    compute_p.add_argument("--lock-sha256", default="")
    compute_p.add_argument("--only", default=None, help="only variants whose key contains this")
    compute_p.add_argument("--shared-limit", action="append", default=[],
                           help="ARCH=BYTES: stop a compile above this shared memory, before code generation")
    compute_p.add_argument("--stored", default=None, help="the stored records (relative to the checkout)")
    compute_p.add_argument("--recheck", type=float, default=None,
                           help=f"share of the cache hits compiled again (default {RECHECK_SHARE}; 1 with --only)")
    compute_p.add_argument("--seed", type=int, default=None, help="seed of the sample and recheck draws")
    compute_p.add_argument("--slice", default=None, metavar="K/N", help="only the variants of slice K of N")
    sub.choices["sample"].add_argument("--keys", required=True)
    args = parser.parse_args(argv)
    return run_guarded("checksums", lambda: compute(args) if args.mode == "compute" else sample(args))


if __name__ == "__main__":
    raise SystemExit(main())
