"""Proof on a GPU that the ahead-of-time checksums are the code the runtime actually runs.

    python -m mha_ci.payloads.codeobj_proof --records out/code_objects/host.json [--arch sm90]

Makes a real `mha.flash_attn_func` call (fp16, causal, B=2, S=1000, H=16, D=64; forward and
backward), takes the code objects Triton JIT-compiled for it from each kernel's JIT cache
(`JITFunction.device_caches[device][0]`, the CompiledKernel's `asm["cubin"]` / `asm["hsaco"]`),
hashes them, and compares each with the record of the same variant in `--records` (a file of
`mha-ci checksums compute`, same Triton version). The variant is found by its compile inputs,
not by name, so a deduplicated key (the preprocess kernel is shared by many problems) is
found too. It also compiles the same variants ahead of time in this process (fresh Triton
cache) and prints that hash: three hashes per kernel, PASS when runtime == record for all.

Shapes: every stride is a multiple of 16 and S = 1000 keeps stride_lh (= S) unaligned, which
is the canonical specialization mha.launch.aligned_specialization describes.
Debug line info is switched off for the JIT too (TRITON_DISABLE_LINE_INFO=1, set here before
triton is imported), as for the recorded compiles. Exit 0 PASS, 1 FAIL, 3 no GPU.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from mha_ci.checksums.compile import CompileTarget, binary_name, compile_task
from mha_ci.checksums.variants import enumerate_variants, identity_key, task_for_spec

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="mha-ci-proof-jit-")   # a real JIT compile, not a cached one

TARGETS = {"sm90": "cuda:90:32", "gfx942": "hip:gfx942:64", "gfx950": "hip:gfx950:64"}


def runtime_kernels(fn) -> list:
    """CompiledKernels in a JITFunction's JIT cache (layout shared by Triton 3.4 .. 3.8)."""
    found = []
    for entry in getattr(fn, "device_caches", {}).values():
        cache = entry[0] if isinstance(entry, tuple) else None
        if isinstance(cache, dict):
            found += list(cache.values())
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.payloads.codeobj_proof")
    parser.add_argument("--records", required=True, type=Path, help="code-object file of `mha-ci checksums compute`")
    parser.add_argument("--arch", default="sm90", choices=sorted(TARGETS))
    parser.add_argument("--seqlen", type=int, default=1000)
    parser.add_argument("--no-gpu", action="store_true",
                        help="skip the runtime call: only check variant lookup and AOT here == record (CPU check)")
    args = parser.parse_args(argv)

    import torch  # toolchain only: after the pin check
    import triton  # toolchain only: after the pin check

    if not args.no_gpu and not torch.cuda.is_available():
        print("codeobj proof: no GPU visible (torch.cuda.is_available() is False)", file=sys.stderr)
        return 3
    import mha  # toolchain only: after the pin check
    from mha import launch  # toolchain only: after the pin check

    device = "none (--no-gpu)" if args.no_gpu else torch.cuda.get_device_name()
    print(f"triton {triton.__version__}, torch {torch.__version__}, device {device}")
    recorded = json.loads(args.records.read_text())
    by_key = {r["key"]: r for r in recorded["records"]}
    print(f"records: {args.records} (triton {recorded.get('toolchain', {}).get('triton')}, {len(by_key)} records)")

    b, s, h, d = 2, args.seqlen, 16, 64
    if not args.no_gpu:
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
        out = mha.flash_attn_func(q, k, v, causal=True)
        out.backward(torch.randn_like(out))
        torch.cuda.synchronize()

    target = CompileTarget.parse(TARGETS[args.arch])
    ext = binary_name(target)
    problem = launch.Problem(dtype="fp16", dqk=d, dv=d, causal=True)
    specs = launch.kernel_specs(problem, args.arch)
    # variant keys by compile inputs (the enumeration dedups identical compiles under one key)
    key_of = {identity_key(var.task): var.key for var in enumerate_variants(args.arch, target)}
    failures = 0
    for name, spec in specs.items():
        task = task_for_spec(launch, spec, f"proof/{name}", target)
        key = key_of.get(identity_key(task))
        compiled = runtime_kernels(spec.fn)
        record = by_key.get(key) if key else None
        if args.no_gpu:
            with tempfile.TemporaryDirectory(prefix="mha-ci-proof-aot-") as tmp:
                os.environ["TRITON_CACHE_DIR"] = tmp
                aot = compile_task(task)
            same = record is not None and record["sha256"] == aot.sha256
            print(f"{name}: variant {key}\n   recorded    {record and record['sha256']}\n   AOT here    "
                  f"{aot.sha256 or aot.error}\n   {'PASS' if same else 'FAIL'}")
            failures += 0 if same else 1
            continue
        if len(compiled) != 1:
            print(f"FAIL {name}: expected one JIT-compiled kernel in {task.qualname}'s cache, found {len(compiled)}")
            for kernel in compiled:
                src = getattr(kernel, "src", None)
                print(f"   runtime attrs {getattr(src, 'attrs', '?')} constants {getattr(src, 'constants', '?')}")
            failures += 1
            continue
        runtime_sha = hashlib.sha256(compiled[0].asm[ext]).hexdigest()
        with tempfile.TemporaryDirectory(prefix="mha-ci-proof-aot-") as tmp:
            os.environ["TRITON_CACHE_DIR"] = tmp      # the AOT compile must not find the JIT's entry
            aot = compile_task(task)
        print(f"{name}: variant {key}")
        print(f"   runtime JIT {runtime_sha}")
        print(f"   recorded    {record['sha256'] if record else '(no record for this variant)'}")
        print(f"   AOT here    {aot.sha256 or aot.error}")
        if record is None or record["sha256"] != runtime_sha:
            failures += 1
            src = getattr(compiled[0], "src", None)
            print(f"   FAIL  runtime signature/attrs: {getattr(src, 'signature', '?')} {getattr(src, 'attrs', '?')}")
            print(f"         AOT attrs: {task.attr_descs}")
        else:
            print("   PASS")
    print("PASS" if failures == 0 else f"FAIL ({failures} of {len(specs)} kernels)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
