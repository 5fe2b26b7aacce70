"""plan(pipeline, event) -> Plan: which jobs run for an event, each with the rule that chose it,
and every other job of the full matrix with why it does not run.

Everything the policy knows comes from pipelines/: jobs.yaml says what each event runs
(`events`) and where each kind exists (`kinds`); triggers.yaml says what labels and changed
paths add. Decisions are made per (kind, arch) pair; every toolchain and every shard of a pair
share its fate, so golden and top-of-tree always run side by side.

Rules, in the order their reasons are listed:
1. the event's `runs` (a pull request: the docs check, and correctness on gfx950 and the
   interpreter). A change that touches only documentation keeps only the kinds of
   `documentation_only_kinds` (the docs check: no kernel test, no GPU, no perf);
   a manual run with labels drops `runs` and runs what the labels select;
2. labels (ci:sm90 adds sm90 correctness and perf, ci:all everything). A label is a person
   asking, so a documentation-only change does not hold it back. A label with our prefix that
   triggers.yaml does not know is a usage error (exit 2), not a silent no-op;
3. changed paths outside the documentation (src/mha/** adds checksums,
   src/mha/configs/sm90-* adds sm90 correctness and perf). Unknown changed paths (--all, an
   event payload without --changed-files, or a checkout git cannot compare) count as every
   path changed;
4. labels over `selected` archs (ci:perf: perf wherever 1-3 chose an arch, including an
   arch a documentation-only change left out).
A draft pull request, or a push to a branch the event does not run on, plans nothing.
"""
from __future__ import annotations

from collections import defaultdict

from mha_ci.errors import ConfigError
from mha_ci.model.pipeline import ARCH_PLACEHOLDER, EventRules, LabelRule, Pipeline, Selection
from mha_ci.model.types import Event, Plan, PlannedJob, SkippedJob
from mha_ci.model.yaml_source import closest
from mha_ci.plan.matrix import full_matrix
from mha_ci.plan.paths import first_match, path_matches

Pair = tuple[str, str]   # (kind, arch)


def plan(pipeline: Pipeline, event: Event) -> Plan:
    _check_labels(pipeline, event)
    rules = pipeline.events[event.kind]
    blocked = _blocked(rules, event)
    if blocked is not None:
        return Plan(jobs=(), skipped=tuple(
            SkippedJob(entry.job.id, entry.unavailable if entry.unavailable is not None else blocked)
            for entry in full_matrix(pipeline)))
    decision = _Decision(pipeline, rules, event)
    jobs, skipped = [], []
    for entry in full_matrix(pipeline):
        job = entry.job
        pair = (job.kind, job.arch)
        if entry.unavailable is not None:
            skipped.append(SkippedJob(job.id, entry.unavailable))
        elif decision.chosen.get(pair):
            jobs.append(PlannedJob(job, "; ".join(dict.fromkeys(decision.chosen[pair]))))
        else:
            skipped.append(SkippedJob(job.id, decision.why_not(pair)))
    return Plan(jobs=tuple(jobs), skipped=tuple(skipped))


def _check_labels(pipeline: Pipeline, event: Event) -> None:
    """A label with our prefix that no rule knows is a typo; running less because of it would go
    unnoticed, so it is a usage error (exit 2). Other labels (bug, docs) are not ours."""
    triggers = pipeline.triggers
    known = [rule.label for rule in triggers.labels]
    for label in sorted(event.labels):
        # GitHub compares label names (and `startsWith` in workflows) without case: CI:SM90 is ours, and a typo.
        if label.casefold().startswith(triggers.label_prefix.casefold()) and label not in known:
            raise ConfigError(f"unknown label '{label}'; known: {', '.join(known)}", key="labels",
                              suggestion=closest(label, known))


def _blocked(rules: EventRules, event: Event) -> str | None:
    if event.draft and rules.skip_draft:
        return "draft pull request"
    if rules.branches is not None and event.branch is not None and event.branch not in rules.branches:
        return f"{event.kind} to '{event.branch}': the {event.kind} pipeline runs only for {', '.join(rules.branches)}"
    return None


class _Decision:
    """Applies the rules of one event; `chosen` and `missed` are keyed by (kind, arch)."""

    def __init__(self, pipeline: Pipeline, rules: EventRules, event: Event) -> None:
        self.pipeline, self.rules, self.event = pipeline, rules, event
        self.available = {(kind, arch) for kind, m in pipeline.kinds.items() for arch in m.archs}
        self.chosen: dict[Pair, list[str]] = defaultdict(list)
        self.missed_runs: dict[Pair, list[str]] = defaultdict(list)   # why `runs` left it out
        self.missed: dict[Pair, list[str]] = defaultdict(list)        # why labels / paths did
        self.absent_labels: dict[Pair, list[str]] = defaultdict(list)  # labels that would have added it
        self.selected: set[str] = set()

        triggers = pipeline.triggers
        given = [rule for rule in triggers.labels if rule.label in event.labels]
        labels_on = rules.labels == "add" or (rules.labels == "replace" and bool(given))
        runs_on = not (rules.labels == "replace" and given)
        self.code_paths = self._code_paths()

        self._apply_runs(runs_on)
        if rules.labels != "ignore":
            self._apply_labels([r for r in triggers.labels if not r.selection.selected_only], labels_on)
        if rules.paths == "apply":
            self._apply_paths()
        if rules.labels != "ignore":
            self._apply_labels([r for r in triggers.labels if r.selection.selected_only], labels_on)

    def _pairs(self, selection: Selection, arch: str) -> list[Pair]:
        return [(kind, arch) for kind in selection.kinds if (kind, arch) in self.available]

    def _code_paths(self) -> tuple[str, ...] | None:
        """Changed paths that are not documentation; None when the changed paths are unknown."""
        if self.event.changed_files is None:
            return None
        docs = self.pipeline.triggers.documentation
        return tuple(p for p in self.event.changed_files if not any(path_matches(p, d) for d in docs))

    def _apply_runs(self, runs_on: bool) -> None:
        # A change that touches only documentation keeps only these kinds; None: it keeps every kind.
        keep = self.rules.documentation_only_kinds if self.code_paths == () else None
        for run in self.rules.runs:
            for arch in run.archs:
                for pair in self._pairs(run, arch):
                    if not runs_on:
                        self.missed_runs[pair].append(f"{self.event.kind} with labels runs only what the labels select")
                        continue
                    self.selected.add(arch)
                    if keep is not None and pair[0] not in keep:
                        changed = "only documentation changed" if self.event.changed_files else "no paths changed"
                        self.missed_runs[pair].append(f"{changed}: only {', '.join(keep) or 'no'} jobs run")
                        continue
                    self.chosen[pair].append(self._run_reason(run, arch))

    def _run_reason(self, run: Selection, arch: str) -> str:
        event = self.event
        if not run.every_arch:
            return f"{event.kind} default arch {arch}"
        if event.kind == "push" and event.branch:
            return f"push to {event.branch}: every arch"
        if event.kind == "manual":
            return "manual run without labels: every arch"
        return f"{event.kind}: every arch"

    def _apply_labels(self, label_rules: list[LabelRule], labels_on: bool) -> None:
        for rule in label_rules:
            present = labels_on and rule.label in self.event.labels
            for arch in rule.selection.archs:
                for pair in self._pairs(rule.selection, arch):
                    if not present:
                        self.absent_labels[pair].append(rule.label)
                    elif rule.selection.selected_only and arch not in self.selected:
                        chosen = ", ".join(a for a in self.pipeline.archs if a in self.selected
                                           and self._pairs(rule.selection, a)) or "none"
                        self.missed[pair].append(f"label {rule.label} covers only the archs already chosen ({chosen})")
                    else:
                        self.chosen[pair].append(f"label {rule.label}")
                        self.selected.add(arch)

    def _apply_paths(self) -> None:
        for rule in self.pipeline.triggers.paths:
            for arch in rule.selection.archs:
                pairs = self._pairs(rule.selection, arch)
                if not pairs:
                    continue
                patterns = tuple(dict.fromkeys(p.replace(ARCH_PLACEHOLDER, arch) for p in rule.patterns))
                reason: str | None
                if self.code_paths is None:
                    more = f" (+{len(patterns) - 1} more)" if len(patterns) > 1 else ""
                    reason = f"path {patterns[0]}{more}: changed files unknown, every path counts as changed"
                else:
                    hit = first_match(self.code_paths, patterns)
                    reason = f"path {hit}" if hit else None
                for pair in pairs:
                    if reason:
                        self.chosen[pair].append(reason)
                        self.selected.add(arch)
                    else:
                        self.missed[pair].append(f"no change to {' or '.join(patterns)}")

    def why_not(self, pair: Pair) -> str:
        notes = list(dict.fromkeys(self.missed_runs.get(pair, [])))
        labels = list(dict.fromkeys(self.absent_labels.get(pair, [])))
        if labels:
            notes.append(f"no label {' or '.join(labels)}")
        notes.extend(dict.fromkeys(self.missed.get(pair, [])))
        if not notes:
            kind, arch = pair
            return f"{kind} on {arch} is not part of the {self.event.kind} pipeline (jobs.yaml events.{self.event.kind})"
        return " and ".join(notes)
