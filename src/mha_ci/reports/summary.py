"""out/summary.md: what ran, why, what it concluded, and what did not run and why.

Rendered from the results.json document only (never from live objects), so every number in the
summary can be found in results.json, and the summary of a run killed halfway is as true as its
results.json.
"""
from __future__ import annotations

from collections import defaultdict

VERDICT_MARK = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skipped": "SKIPPED"}
EXIT_MEANING = {0: "all gates pass", 1: "a gate failed", 2: "configuration error", 3: "environment problem",
                4: "internal error", 130: "interrupted (SIGINT)", 143: "interrupted (SIGTERM)"}


def render(results: dict) -> str:
    jobs = results.get("jobs", [])
    unpinned = [j for j in jobs if j.get("details", {}).get("pin_mismatches")]
    lines = (_preamble(results, unpinned) + _jobs_table(jobs) + _balance_section(jobs) + _versions_section(jobs)
             + _unpinned_section(unpinned) + _failed_tests_section(jobs) + _left_over_sections(results))
    return "\n".join(lines).rstrip("\n") + "\n"


def _preamble(results: dict, unpinned: list[dict]) -> list[str]:
    """Title, verdict headline, provenance line, and the UNPINNED warning when the pins were recorded."""
    prov = results.get("provenance", {})
    exit_code = results.get("exit_code", 0)
    lines = ["# mha-ci run", ""]
    lines.append(_headline(results.get("status", "finished"), exit_code, len(results.get("pending", []))))
    lines.append("")
    commit = prov.get("commit") or "unknown"
    lines.append(f"executor `{prov.get('executor', '?')}`, python {prov.get('python', '?')}, commit `{commit[:12]}`"
                 f"{' (with uncommitted changes)' if prov.get('dirty') else ''}, {prov.get('date', '?')}")
    lines.append("")
    if prov.get("pin_mode") == "record":
        lines += ["**UNPINNED run** (`--pins record`): the payloads ran what this host has installed; "
                  f"{len(unpinned)} job(s) differ from their toolchain's lock (listed below). Their verdicts are "
                  "real but not the pinned toolchain's.", ""]
    return lines


def _jobs_table(jobs: list[dict]) -> list[str]:
    lines = ["## Jobs", ""]
    if jobs:
        lines += ["| job | verdict | time | why it ran | result |", "|---|---|---|---|---|"]
        for job in jobs:
            lines.append(f"| `{job['job_id']}` | {VERDICT_MARK.get(job['verdict'], job['verdict'])} | "
                         f"{_seconds(job.get('timings', {}).get('total'))} | {_cell(job.get('reason', ''))} | "
                         f"{_cell(job.get('message', ''))} |")
    else:
        lines.append("No job ran.")
    lines.append("")
    return lines


def _balance_section(jobs: list[dict]) -> list[str]:
    balance = _balance_lines(jobs)
    if not balance:
        return []
    return ["## Correctness shard balance", "",
            "Predicted from the recorded test durations (perf_baselines/test_durations/); actual is the "
            "sum of JUnit test times per shard. Imbalance = slowest shard / mean shard.", ""] + balance + [""]


def _versions_section(jobs: list[dict]) -> list[str]:
    versions = _versions(jobs)
    if not versions:
        return []
    lines = ["## Toolchain versions (as installed)", "",
             "| job | python | torch | triton | numpy |", "|---|---|---|---|---|"]
    for job_id, found in versions:
        lines.append(f"| `{job_id}` | {found.get('python', '-')} | {found.get('torch') or '-'} | "
                     f"{found.get('triton') or '-'} | {found.get('numpy') or '-'} |")
    lines.append("")
    return lines


def _unpinned_section(unpinned: list[dict]) -> list[str]:
    if not unpinned:
        return []
    lines = ["## Unpinned: what differs from the locks", ""]
    for job in unpinned:
        lines += [f"- `{job['job_id']}`: {m}" for m in job["details"]["pin_mismatches"]]
    lines.append("")
    return lines


def _failed_tests_section(jobs: list[dict]) -> list[str]:
    failing = [j for j in jobs if j.get("details", {}).get("failed_tests")]
    if not failing:
        return []
    lines = ["## Failed tests", ""]
    for job in failing:
        for test in job["details"]["failed_tests"]:
            lines.append(f"- `{job['job_id']}`: `{test}`")
    lines.append("")
    return lines


def _left_over_sections(results: dict) -> list[str]:
    """The jobs this run did not finish: not runnable here, still to run, not planned."""
    lines: list[str] = []
    not_run = results.get("not_run", [])
    if not_run:
        lines += ["## Not run on this machine", ""]
        for entry in not_run:
            flag = " (requested with --job: exit 3)" if entry.get("requested") else ""
            lines.append(f"- `{entry['id']}`: not run: {entry['reason']}{flag}")
        lines.append("")
    pending = results.get("pending", [])
    if pending:
        lines += ["## Still to run", ""] + [f"- `{p}`" for p in pending] + [""]
    skipped = results.get("skipped", [])
    if skipped:
        lines += ["## Not planned", ""] + [f"- `{s['id']}`: {s['reason']}" for s in skipped] + [""]
    return lines


def _headline(status: str, exit_code, pending: int) -> str:
    if status == "running":
        return f"**RUNNING: no verdict yet**, {pending} job(s) still to run"
    if status == "interrupted":
        return (f"**INTERRUPTED: exit {exit_code} ({EXIT_MEANING.get(exit_code, '?')}), no verdict**, "
                f"{pending} job(s) never finished")
    return f"**Result: exit {exit_code} ({EXIT_MEANING.get(exit_code, '?')})**"


def _balance_lines(jobs: list[dict]) -> list[str]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for job in jobs:
        details = job.get("details", {})
        if job.get("kind") == "correctness" and "predicted" in details:
            groups[(details.get("shards"), job["job_id"].rsplit("-", 1)[0])].append(job)
    if not groups:
        return []
    warnings: list[str] = []
    out = ["| shards of | shards | predicted loads (s) | predicted imbalance | actual loads (s) | actual imbalance |",
           "|---|---|---|---|---|---|"]
    for (count, base), members in sorted(groups.items(), key=lambda kv: kv[0][1]):
        predicted = members[0]["details"]["predicted"]
        actual = {m["details"]["shard"]: m["details"]["actual"]["this_shard_s"]
                  for m in members if "actual" in m.get("details", {})}
        if count and len(actual) == count and sum(actual.values()) > 0:
            loads = [actual[i] for i in sorted(actual)]
            mean = sum(loads) / len(loads)
            actual_text, imbalance = ", ".join(f"{x:.1f}" for x in loads), f"{max(loads) / mean:.2f}"
        else:
            actual_text = ", ".join(f"{i}: {actual[i]:.1f}" for i in sorted(actual)) or "-"
            imbalance = f"- ({len(actual)} of {count} shards ran here)"
        out.append(f"| `{base}` | {count} | {', '.join(f'{x:.1f}' for x in predicted['loads_s'])} | "
                   f"{predicted['imbalance']:.2f} | {actual_text} | {imbalance} |")
        digests = {m["details"].get("collected_sha256") for m in members}
        if len(digests) > 1:
            warnings.append(f"**Warning:** the shards of `{base}` collected different test lists (different "
                            "checkouts?): some tests may have run twice or not at all.")
    return out + ([""] + warnings if warnings else [])


def _versions(jobs: list[dict]) -> list[tuple[str, dict]]:
    return [(j["job_id"], j["details"]["versions"]) for j in jobs if j.get("details", {}).get("versions")]


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
