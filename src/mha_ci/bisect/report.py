"""The bisect's report: OUT/report.txt, OUT/report.md and OUT/report.json, all from one summary.

It names the first commit that moved the shapes beyond their threshold (subject and the diff stat
of src/ and perf_baselines/code_objects), each step's deltas, the commits the CPU stage removed
and why (the same src/mha tree, or another tree with the same code objects), and the GPU seconds.
"""
from __future__ import annotations

import json
from pathlib import Path

from mha_ci.bisect import commits as git_commits
from mha_ci.bisect.search import Outcome, Step, most_steps
from mha_ci.files import write_atomic

VERDICTS = {
    "found": "found the first commit that moved",
    "not reproducible": "not reproducible on this machine: bad does not regress against good",
    "no kernel change": "no code object of these shapes changed between good and bad: no commit of the "
                        "range can have moved their kernels (a move seen elsewhere is the machine's or the harness's)",
    "no verdict": "no verdict: a step could not be judged",
    "planned": "CPU stage only: the distinct builds below are what the GPU stage searches",
}


def summary(request, plan, steps: dict[str, Step], outcome: Outcome | None, status: str, reason: str) -> dict:
    index = {c.sha: i for i, build in enumerate(plan.builds) for c in build}
    measured = list(outcome.steps) if outcome else [s for s in steps.values() if s.commit in index]
    by_sha = {c.sha: c for c in plan.commits}
    skipped = []
    for build in plan.builds:
        for before, commit in zip(build, build[1:]):
            skipped.append({"sha": commit.sha, "subject": commit.subject, "build_of": build[0].sha,
                            "why": "src/mha unchanged" if commit.tree == before.tree
                            else "src/mha changed, code objects equal"})
    data = {"schema": "mha-ci.bisect-report/1", "status": status, "verdict": VERDICTS[status], "reason": reason,
            "good": plan.good, "bad": plan.bad, "arch": request.arch, "toolchain": request.toolchain,
            "pass": request.pass_, "shapes": sorted(request.keys), "commits": len(plan.commits),
            "builds": [{"first": b[0].sha, "subject": b[0].subject, "commits": len(b)} for b in plan.builds],
            "removed": len(plan.commits) - len(plan.builds), "skipped": skipped,
            "most_steps": most_steps(len(plan.builds)) if len(plan.builds) > 1 else 0,
            "steps": [{**s.to_dict(), "build": index[s.commit] + 1, "subject": by_sha[s.commit].subject}
                      for s in measured],
            "gpu_seconds": round(sum(s.seconds for s in measured), 1), "first_moved": None}
    if outcome is not None and outcome.first_moved is not None:
        first = plan.builds[outcome.first_moved][0]
        data["first_moved"] = {"sha": first.sha, "subject": first.subject,
                               "diff_stat": git_commits.diff_stat(request.repo, first.sha)}
    return data


def _step_lines(data: dict, markdown: bool) -> list[str]:
    lines = []
    for n, step in enumerate(data["steps"], 1):
        verdict = "regressed" if step["regressed"] else "not regressed"
        head = (f"{n}. build {step['build']} `{step['commit'][:12]}` {step['subject'][:72]}: **{verdict}**"
                if markdown else f"  {n}. build {step['build']} {step['commit'][:12]} {step['subject'][:60]}: {verdict}")
        lines.append(f"{head} ({step['seconds']:.0f} s)")
        for key, s in step["shapes"].items():
            figures = (f"{s['delta_pct']:+.2f} % (threshold {s['threshold_pct']:.2f} %, good {s['good_us']} us, "
                       f"build {s['build_us']} us)" if s.get("delta_pct") is not None else s.get("reason") or "")
            lines.append(f"   - `{key}`: {s['status']} {figures}" if markdown else f"       {key}: {s['status']} {figures}")
    return lines


def text(data: dict) -> str:
    lines = [f"perf bisect {data['good'][:12]}..{data['bad'][:12]} on {data['arch']}, {data['toolchain']}: "
             f"{data['verdict']}"]
    if data["reason"]:
        lines.append(f"  {data['reason']}")
    first = data["first_moved"]
    if first:
        lines += [f"  first commit that moved: {first['sha']} {first['subject']}", *(
            f"    {line}" for line in first["diff_stat"].splitlines())]
    lines.append(f"  shapes: {', '.join(data['shapes'])}")
    lines.append(f"  CPU stage: {data['commits']} commits, {len(data['builds'])} distinct builds, "
                 f"{data['removed']} commit(s) removed (no GPU time)")
    for n, build in enumerate(data["builds"], 1):
        lines.append(f"    build {n}: {build['first'][:12]} {build['subject'][:60]} ({build['commits']} commit(s))")
    if data["steps"]:
        lines.append(f"  steps ({len(data['steps'])}, at most {data['most_steps']}; GPU {data['gpu_seconds']:.0f} s):")
        lines += _step_lines(data, markdown=False)
    return "\n".join(lines) + "\n"


def markdown(data: dict) -> str:
    lines = [f"# perf bisect `{data['good'][:12]}..{data['bad'][:12]}` ({data['arch']}, {data['toolchain']})", "",
             f"**{data['verdict']}**" + (f": {data['reason']}" if data["reason"] else ""), ""]
    first = data["first_moved"]
    if first:
        lines += [f"First commit that moved: `{first['sha']}` {first['subject']}", "", "```",
                  first["diff_stat"] or "(no change under src/ or perf_baselines/code_objects)", "```", ""]
    lines += ["Shapes: " + ", ".join(f"`{k}`" for k in data["shapes"]), "",
              f"## Steps (GPU {data['gpu_seconds']:.0f} s)", ""]
    lines += _step_lines(data, markdown=True) or ["(none measured)"]
    lines += ["", f"## CPU stage: {data['commits']} commits, {len(data['builds'])} distinct builds, "
              f"{data['removed']} removed", "", "| build | first commit | commits | subject |", "|---|---|---|---|"]
    lines += [f"| {n} | `{b['first'][:12]}` | {b['commits']} | {b['subject'][:80]} |"
              for n, b in enumerate(data["builds"], 1)]
    if data["skipped"]:
        lines += ["", "<details><summary>Commits that needed no GPU time</summary>", ""]
        lines += [f"- `{s['sha'][:12]}` {s['subject'][:80]}: {s['why']} (build of `{s['build_of'][:12]}`)"
                  for s in data["skipped"]]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def write(data: dict, out: Path) -> dict[str, Path]:
    paths = {"txt": Path(out) / "report.txt", "md": Path(out) / "report.md", "json": Path(out) / "report.json"}
    write_atomic(paths["txt"], text(data))
    write_atomic(paths["md"], markdown(data))
    write_atomic(paths["json"], json.dumps(data, indent=1) + "\n")
    return paths
