"""Pruning on the CPU: guards first (no compile), then the ahead-of-time compile and the resource
gate of the checksums job (arch limits from pipelines/archs.yaml, spills).

Rules, in order; the first that holds prunes the candidate and is its reason:
  guard       a prohibition guard of the config file forbids a value for a problem the bucket
              can reach, on this toolchain (mha.guards);
  compile     the ahead-of-time compile failed (or the kernel refused the config);
  shared      shared memory / LDS above the arch's limit (it would fail at launch); with the
              limit in the compile request the compile stops before code generation there
              (mha_ci.checksums.compile, shared memory gate), so the kernel has no code object,
              only its refusal: seconds instead of minutes of ptxas;
  registers   registers per thread above the arch's limit;
  spills      the code object spills registers where the current config does not, or more.
The current config is judged too (it may breach a limit under a new toolchain) but never pruned:
it is what every candidate is timed against.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mha_ci.tune.rules import guard_verdict
from mha_ci.tune.space import CURRENT, Candidate

RULES = ("guard", "compile", "shared", "registers", "spills")


@dataclass
class Decision:
    candidate: Candidate
    rule: str | None = None           # one of RULES, or None: survives
    why: str = ""
    resources: dict = field(default_factory=dict)   # kernel -> shared_bytes, registers, spills
    notes: list[str] = field(default_factory=list)

    @property
    def survives(self) -> bool:
        return self.rule is None

    def to_json(self) -> dict:
        return {**self.candidate.to_json(), "pruned": self.rule, "why": self.why, "resources": self.resources,
                "notes": self.notes}


def by_guards(candidates: list[Candidate], module, guards: list[dict], pass_: str, bucket: str,
              triton_version: str | None) -> list[Decision]:
    out = []
    for cand in candidates:
        why, notes = guard_verdict(module, guards, pass_, bucket, cand.cfg, triton_version)
        decision = Decision(cand, notes=notes)
        if why and cand.id != CURRENT:
            decision.rule, decision.why = "guard", why
        elif why:
            decision.notes.append(f"the current config breaks {why}")
        out.append(decision)
    return out


def _sum_spills(kernels: dict) -> int:
    return sum(int(k.get("spills", 0)) for k in kernels.values())


def by_resources(decisions: list[Decision], compiled: dict, limits) -> None:
    """Apply the compile/resource rules to the guard survivors; `compiled` is candidate id ->
    {"error", "kernels": {name: {shared_bytes, registers, spills, error}}}; limits has
    shared_bytes and registers (None: the arch is not gated)."""
    current = next((d for d in decisions if d.candidate.id == CURRENT), None)
    base_spills = _sum_spills(compiled.get(CURRENT, {}).get("kernels", {})) if current else 0
    for decision in decisions:
        if not decision.survives:
            continue
        result = compiled.get(decision.candidate.id)
        if result is None:
            decision.rule, decision.why = "compile", "no compile result (the compile payload did not return it)"
            continue
        kernels = result.get("kernels", {})
        decision.resources = {name: {k: v.get(k) for k in ("shared_bytes", "registers", "spills")}
                              for name, v in kernels.items()}
        verdict = _judge(result, kernels, limits, base_spills)
        if verdict is None:
            continue
        if decision.candidate.id == CURRENT:
            decision.notes.append(f"the current config fails rule {verdict[0]}: {verdict[1]}")
        else:
            decision.rule, decision.why = verdict


def _judge(result: dict, kernels: dict, limits, base_spills: int) -> tuple[str, str] | None:
    errors = [f"{name}: {k['error']}" for name, k in kernels.items() if k.get("error")]
    if result.get("error") or errors:
        text = result.get("error") or errors[0]
        return "compile", text.strip().splitlines()[-1][:300] if text.strip() else "compile failed"
    refused = [f"{name}: {k['refused']}" for name, k in kernels.items() if k.get("refused")]
    if refused:
        return "shared", refused[0]
    if limits is not None:
        for name, k in kernels.items():
            if k["shared_bytes"] > limits.shared_bytes:
                return "shared", (f"{name}: shared memory {k['shared_bytes']} bytes > limit {limits.shared_bytes} "
                                  f"({k['shared_bytes'] / limits.shared_bytes:.2f}x)")
        for name, k in kernels.items():
            if k["registers"] > limits.registers:
                return "registers", f"{name} uses {k['registers']} registers, the limit is {limits.registers}"
    spills = _sum_spills(kernels)
    if spills > base_spills:
        return "spills", f"spills {spills} (the current config {base_spills})"
    return None


def summary(decisions: list[Decision]) -> dict:
    """Counts: candidates (current excluded), pruned per rule, remaining."""
    others = [d for d in decisions if d.candidate.id != CURRENT]
    pruned = {rule: sum(1 for d in others if d.rule == rule) for rule in RULES}
    return {"candidates": len(others), "pruned": pruned, "remaining": sum(1 for d in others if d.survives)}
