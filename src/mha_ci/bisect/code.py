"""The code objects a commit gives the bisected shapes: the CPU stage's unit of work.

A forward shape times the forward, a backward shape (`_bwd`) the backward step (the forward it
needs runs untimed). Which kernels run depends on the commit (its configs select Triton, Gluon or
warp-specialized kernels) and on the inputs (a Gluon kernel falls back to the Triton one for
lengths it cannot take; the Gluon forward has a form per grid), so a commit's build is every kernel
spec of the pass its package makes for the problem (EVERY_KERNEL_OF_THE_PASS): a change to any of
them is a build of its own. Each distinct compile problem of the shapes (dtype, head dims and the
flags that change generated code: causal, bounded window sides, sink, dropout, varlen) is
compiled ahead of time for the arch with the commit's own configs, through the tune compile
payload (mha_ci.checksums.candidates.compile_candidates, an empty override: the shipped config)
and so through the checksums compile cache, whose key covers the kernel package's sources: a
second bisect over the same commits compiles nothing.

The code object is the canonical aligned launch's (mha_ci.checksums.variants); host-side changes
that leave every code object alone (the grid, extra tensor work in mha.launch) are not seen: such
a commit shares its neighbour's build (docs/bisect.md says what that means for a search).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from mha_ci.bisect.commits import Commit
from mha_ci.errors import EnvironmentProblem
from mha_ci.perf.base_checkout import materialise
from mha_ci.checksums.candidates import compile_candidates
from mha_ci.checksums.compile import EVERY_KERNEL_OF_THE_PASS

CONFIG_PASS = {"fwd": "forward", "bwd": "backward"}

# commit -> {"<problem>/<kernel>": sha256}; raises CodeObjectsUnknown when it cannot say
CodeObjectsFn = Callable[[Commit], dict[str, str]]


class CodeObjectsUnknown(Exception):
    """A commit whose code objects could not be computed: it is a build of its own (fail closed)."""


def problem_of(shape) -> dict:
    """The compile problem (mha.launch.Problem fields) of a mha_ci.perf.shapes.Shape."""
    return {"dtype": shape.dtype, "dqk": shape.dqk, "dv": shape.dv, "causal": shape.causal,
            "window": list(shape.window), "has_sink": shape.sink, "dropout": shape.dropout_p > 0,
            "varlen": shape.layout == "varlen"}


def problem_label(pass_: str, problem: dict) -> str:
    flags = [name for name in ("causal", "has_sink", "dropout", "varlen") if problem[name]]
    left, right = problem["window"]
    flags += [f"wl{int(left >= 0)}wr{int(right >= 0)}"] if (left, right) != (-1, -1) else []
    return "-".join([pass_, problem["dtype"], f"d{problem['dqk']}x{problem['dv']}", *flags])


def compile_items(shapes, arch: str) -> list[dict]:
    """One compile request item per distinct (pass, problem) of the shapes, for every kernel of the pass."""
    items: dict[str, dict] = {}
    for shape in shapes:
        problem = problem_of(shape)
        key = problem_label(shape.pass_, problem)
        items.setdefault(key, {"key": key, "arch": arch, "pass": CONFIG_PASS[shape.pass_], "problem": problem,
                               "config": {}, "kernels": EVERY_KERNEL_OF_THE_PASS})
    return [items[k] for k in sorted(items)]


def code_objects_of(compiled: dict, items: list[dict]) -> dict[str, str]:
    """{"<item>/<kernel>": sha256} from the compile payload's results, every kernel it compiled for
    each item; CodeObjectsUnknown for an item with none, or any kernel without a code object (a
    compile error, a refusal, a missing result)."""
    found: dict[str, str] = {}
    results = compiled.get("results") or {}
    for item in items:
        result = results.get(item["key"]) or {}
        if result.get("error"):
            raise CodeObjectsUnknown(f"{item['key']}: {str(result['error']).strip()[:300]}")
        kernels = result.get("kernels") or {}
        if not kernels:
            raise CodeObjectsUnknown(f"{item['key']}: no kernel compiled")
        for name, entry in sorted(kernels.items()):
            if not entry.get("sha256"):
                why = entry.get("error") or entry.get("refused") or "no result"
                raise CodeObjectsUnknown(f"{item['key']}/{name}: {str(why).strip().splitlines()[-1][:300]}")
            found[f"{item['key']}/{name}"] = entry["sha256"]
    return found


def fingerprint(code_objects: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(code_objects, sort_keys=True).encode()).hexdigest()


def compiler(root: Path, pipeline, arch: str, toolchain: str, items: list[dict], make_executor, out: Path,
             jobs: int | None = None) -> CodeObjectsFn:
    """The real CodeObjectsFn: the commit's kernel package materialised beside the working tree's
    harness (mha_ci.perf.base_checkout) under OUT/checkouts, compiled into OUT/cpu/<sha>.
    `make_executor(root)` gives the executor for a checkout folder."""
    def code_objects(commit: Commit) -> dict[str, str]:
        checkout = Path(out) / "checkouts" / commit.sha[:12]
        materialise(root, commit.sha, checkout)
        try:
            compiled = compile_candidates(root, pipeline.toolchains[toolchain], pipeline.archs[arch], pipeline,
                                          items, make_executor(checkout), Path(out) / "cpu" / commit.sha[:12], jobs)
        except EnvironmentProblem as exc:
            raise CodeObjectsUnknown(str(exc)) from None
        return code_objects_of(compiled, items)
    return code_objects
