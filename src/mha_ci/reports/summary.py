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
# summary.md is appended to the step summary (1 MiB) and may be posted as a pull-request comment,
# whose limit (65,536 characters) is the smaller: the perf verdicts get what the rest leaves of it.
COMMENT_LIMIT = 65_536
COMMENT_MARGIN = 1_000
# Moved shapes named in the open per pass and direction; the folded table holds the rest.
SHOWN_SHAPES = 5


def render(results: dict) -> str:
    jobs = results.get("jobs", [])
    unpinned = [j for j in jobs if j.get("details", {}).get("pin_mismatches")]
    rest = (_jobs_table(jobs) + _balance_section(jobs) + _versions_section(jobs)
            + _unpinned_section(unpinned) + _failed_tests_section(jobs) + _left_over_sections(results))
    preamble = _preamble(results, unpinned)
    used = sum(len(line) + 1 for line in preamble + rest)
    lines = preamble + _perf_verdicts(jobs, COMMENT_LIMIT - COMMENT_MARGIN - used) + rest
    return "\n".join(lines).rstrip("\n") + "\n"


def _perf_verdicts(jobs: list[dict], budget: int) -> list[str]:
    """One section per perf job that gated: verdict, moved shapes, next commands, the full list
    folded; together within `budget` characters (the folded tables are cut, with a count)."""
    gated = [j for j in jobs if j.get("kind") == "perf" and isinstance(j.get("details", {}).get("verdict"), dict)]
    out: list[str] = []
    for job in gated:
        out += _perf_verdict(job, max(0, budget // len(gated)))
    return out


def _perf_verdict(job: dict, budget: int) -> list[str]:
    verdict = job["details"]["verdict"]
    lines = [f"## Perf verdict: `{job['job_id']}`", "", f"**{_cell(verdict.get('verdict', ''))}**", ""]
    rows: list[tuple[str, dict]] = []
    for p, found in verdict.get("passes", {}).items():
        lines += [f"**{p}: {found.get('tally', '')}**", ""]
        for name, word in (("regressions", "Regressed"), ("improvements", "Improved")):
            moved = found.get(name) or {}
            shapes, count = moved.get("shapes", []), moved.get("count", 0)
            if not count:
                continue
            # The blank line makes a list of it in every renderer, not only GitHub's (a list that
            # interrupts a paragraph ran into one paragraph in Python-Markdown).
            lines += [f"{word} ({count}):", ""]
            lines += [f"- `{s['key']}`: {_moved_text(s)}" for s in shapes[:SHOWN_SHAPES]]
            if count > SHOWN_SHAPES:
                lines.append(f"- and {count - SHOWN_SHAPES} more (the table below)")
            lines.append("")
            rows += [(p, s) for s in shapes]
            if count > len(shapes):
                rows.append((p, {"more": count - len(shapes), "name": name}))
    steps = verdict.get("next_steps") or []
    if steps:
        lines += ["Next:", "", "```sh"]
        for step in steps:
            lines += [f"# {step['what']}", step["command"]]
        lines += ["```", ""]
    report = verdict.get("report")
    tail = [f"The full report: `{report}` in the job's artifact.", ""] if report else []
    if rows:
        lines += _folded_table(rows, budget - sum(len(line) + 1 for line in lines + tail))
    return lines + tail


def _moved_text(s: dict) -> str:
    """`+12.3 %` (threshold, noise of both sides, whether the code objects changed)."""
    ci = s.get("ci_pct")
    interval = f"95 % CI {ci[0]:+.1f}..{ci[1]:+.1f} %, " if isinstance(ci, list) and len(ci) == 2 else ""
    return (f"**{_signed(s.get('delta_pct'))} %** ({interval}threshold {_num(s.get('threshold_pct'))} %, noise "
            f"{_num(s.get('noise_baseline_pct'))} % / {_num(s.get('noise_candidate_pct'))} %; {_code(s)}"
            + ("; stalled" if s.get("stall") else "") + ")")


def _code(s: dict) -> str:
    same = s.get("same_code")
    if same is None:
        return "code objects unknown"
    return "same code objects" if same else "code objects changed"


def _folded_table(rows: list[tuple[str, dict]], budget: int) -> list[str]:
    """Every stored moved shape in a <details> table, rows cut with a count where the budget ends."""
    total = sum(r.get("more", 1) for _, r in rows)
    head = [f"<details><summary>All {total} regressed and improved shapes</summary>", "",
            "| pass | shape | delta % | threshold % | noise % base / cand | code objects | bucket |",
            "|---|---|---|---|---|---|---|"]
    foot = ["", "</details>", ""]
    left = budget - sum(len(line) + 1 for line in head + foot) - 120
    body: list[str] = []
    cut = 0
    for p, r in rows:
        if "more" in r:
            cut += r["more"]
            continue
        line = (f"| {p} | `{r['key']}` | {_signed(r.get('delta_pct'))} | {_num(r.get('threshold_pct'))} | "
                f"{_num(r.get('noise_baseline_pct'))} / {_num(r.get('noise_candidate_pct'))} | {_code(r)} | "
                f"{r.get('bucket') or '-'} |")
        if cut or len(line) + 1 > left:     # worst first: once one does not fit, neither do the rest
            cut += 1
            continue
        left -= len(line) + 1
        body.append(line)
    if not body:
        return [f"{total} regressed and improved shapes: too many to list here; the full report has them.", ""]
    if cut:
        body.append(f"| | {cut} more not listed (the summary stays under GitHub's {COMMENT_LIMIT:,}-character "
                    "comment limit): the full report has them | | | | | |")
    return head + body + foot


def _signed(value) -> str:
    return "-" if value is None else f"{value:+.1f}"


def _num(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _preamble(results: dict, unpinned: list[dict]) -> list[str]:
    """Title, verdict headline, provenance line, and the UNPINNED warning when the pins were recorded."""
    prov = results.get("provenance", {})
    exit_code = results.get("exit_code", 0)
    lines = ["# mha-ci run", ""]
    lines.append(_headline(results.get("status", "finished"), exit_code, len(results.get("pending", []))))
    if results.get("status") == "finished" and not results.get("jobs"):
        lines.append("")
        lines.append("**No job ran on this machine**: nothing vouches for the change, so the run is not a pass "
                     "(the jobs planned, if any, are listed as not run below).")
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
