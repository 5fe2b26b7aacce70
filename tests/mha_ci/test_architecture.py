"""The import rules and the process boundary of docs/architecture.md, read from the code with `ast`.

Every import counts, at module level or inside a function: a rule that held only for module
level imports could be broken one indentation deeper.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

FOUNDATION = {"errors", "files", "git", "baselines", "cache", "crash", "__init__"}
# Folders of mha_ci that orchestrate a run or present it: the domain below never imports them.
ABOVE_THE_DOMAIN = {"cli", "__main__", "commands", "jobs", "reports", "export", "payloads"}
# Modules that need what only a toolchain environment or an optional install has.
NOT_ON_THE_PAYLOAD_SIDE = {"pydantic", "yaml"}


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(SRC).with_suffix("").parts)
    return name.removesuffix(".__init__")


def source_file(module: str) -> Path | None:
    base = SRC.joinpath(*module.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@cache
def imports_of(module: str) -> frozenset[str]:
    """Every module `module` imports (`from a import b` counts a.b when b is a module)."""
    path = source_file(module)
    assert path is not None, module
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if source_file(f"{node.module}.{a.name}")}
    return frozenset(found)


def runner_modules() -> list[str]:
    return sorted(module_name(p) for p in (SRC / "mha_ci").rglob("*.py"))


def area(module: str) -> str:
    """The folder (or top-level module) of mha_ci a module belongs to: "perf", "errors", ..."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def own_imports(module: str) -> set[str]:
    """The mha_ci modules `module` imports, with the packages above each (importing a.b.c runs a.b)."""
    found = set()
    for name in imports_of(module):
        parts = name.split(".")
        if parts[0] == "mha_ci":
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1) if source_file(".".join(parts[:i]))}
    return found


def test_a_command_never_imports_another_command():
    bad = [f"{m} imports {t}" for m in runner_modules() if area(m) == "commands"
           for t in own_imports(m) if area(t) == "commands" and t not in ("mha_ci.commands", "mha_ci.commands.options")]
    assert not bad, f"commands share options through commands/options.py, never each other: {bad}"


def test_only_the_cli_imports_commands():
    bad = [f"{m} imports {t}" for m in runner_modules() if area(m) not in ("commands", "cli")
           for t in own_imports(m) if area(t) in ("commands", "cli") and not (area(m) == "__main__" and area(t) == "cli")]
    assert not bad, bad


def test_the_domain_never_imports_what_orchestrates_it():
    bad = [f"{m} imports {t}" for m in runner_modules() if area(m) not in ABOVE_THE_DOMAIN
           for t in own_imports(m) if area(t) in ABOVE_THE_DOMAIN]
    assert not bad, f"docs/architecture.md, import rules: {bad}"


def test_jobs_are_imported_by_commands_only():
    bad = [f"{m} imports {t}" for m in runner_modules() if area(m) not in ("jobs", "commands")
           for t in own_imports(m) if area(t) == "jobs"]
    assert not bad, bad


def test_the_foundation_imports_only_itself():
    bad = [f"{m} imports {t}" for m in runner_modules() if area(m) in FOUNDATION
           for t in own_imports(m) if area(t) not in FOUNDATION]
    assert not bad, bad


def test_model_imports_from_perf_only_the_workload_generator():
    bad = [f"{m} imports {t}" for m in runner_modules() if area(m) == "model"
           for t in own_imports(m) if area(t) not in FOUNDATION | {"model"}
           and t not in ("mha_ci.perf.workloads", "mha_ci.perf.shapes", "mha_ci.perf.buckets")]
    assert not bad, bad


def test_the_kernel_package_never_imports_the_runner():
    kernel = sorted(module_name(p) for p in (SRC / "mha").rglob("*.py"))
    bad = [f"{m} imports {t}" for m in kernel for t in imports_of(m) if t.split(".")[0] == "mha_ci"]
    assert not bad, bad


# -- the process boundary ----------------------------------------------------------------------

def payload_modules() -> list[str]:
    return sorted(module_name(p) for p in (SRC / "mha_ci" / "payloads").glob("*.py"))


def payload_side() -> set[str]:
    """Every mha_ci and mha module a payload can import, directly or through another."""
    seen: set[str] = set()
    todo = payload_modules()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in imports_of(module):
            parts = name.split(".")
            if parts[0] in ("mha_ci", "mha"):
                todo += [".".join(parts[:i]) for i in range(1, len(parts) + 1) if source_file(".".join(parts[:i]))]
    return seen


def documented_shared() -> set[str]:
    """The modules docs/architecture.md lists under "Shared across the process boundary"."""
    text = ARCHITECTURE.read_text()
    section = text.split("### Shared across the process boundary", 1)[1].split("\n#", 1)[0]
    names = set()
    for path in re.findall(r"`src/([\w/]+)\.py`", section):
        names.add(path.replace("/", ".").removesuffix(".__init__"))
    return names


def test_the_documented_shared_modules_are_what_the_payloads_import():
    # mha.* beyond mha.config is the code under test, imported inside a toolchain only.
    shared = {m for m in payload_side() if not m.startswith("mha_ci.payloads")
              and (m.startswith("mha_ci") or m == "mha.config")}
    documented = documented_shared()
    assert shared == documented, (
        f"docs/architecture.md's shared modules are out of date: the payloads also import "
        f"{sorted(shared - documented)}; listed but not imported: {sorted(documented - shared)}")


def test_no_payload_can_reach_pydantic_or_yaml():
    bad = [f"{m} imports {t}" for m in sorted(payload_side()) for t in imports_of(m)
           if t.split(".")[0] in NOT_ON_THE_PAYLOAD_SIDE]
    assert not bad, f"payloads run with the toolchain's packages only: {bad}"


# Payload modules that define @triton.jit kernels at import, so they load only inside a toolchain
# (which this test's interpreter is not); the ast walk above still checks their imports.
KERNEL_MODULES = {"mha_ci.payloads.memcheck_plant"}


@pytest.mark.parametrize("payload", [m for m in payload_modules() if m not in KERNEL_MODULES])
def test_every_payload_imports_without_pydantic_or_yaml(payload):
    # The ast walk above, checked by the interpreter: both blocked, the payload module still loads.
    code = "import sys; sys.modules['pydantic'] = None; sys.modules['yaml'] = None; import " + payload
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(SRC)),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_function_local_import_says_why():
    """Imports go at module level; one inside a function (a heavy or optional dependency) carries
    its reason as a comment on its line."""
    bare = []
    for path in sorted((SRC / "mha_ci").rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)) and "#" not in lines[inner.end_lineno - 1]:
                        bare.append(f"{path.relative_to(ROOT)}:{inner.lineno}")
    assert not bare, f"function-local imports without a reason: {sorted(set(bare))}"
