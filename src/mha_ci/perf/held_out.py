"""Leave one group out: how a stored baseline judges runs of a machine it was not measured on.

A group is the runs of one machine allocation (or one day). Each group's runs are compared with
a baseline combined (mha_ci.perf.combine) from the runs of every other group: the perf job's
own case when a pull request runs on a machine the stored baseline never saw. Regressions called
on runs of one unchanged build are false ones; they measure the between-machine noise the gate
has to absorb (docs/perf-method.md, "Noise between runs and machines").
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from mha_ci.perf.combine import combine
from mha_ci.perf.compare import GatePolicy, compare


def combined_without(docs: Mapping[str, dict], groups: Mapping[str, Sequence[str]], left_out: str | None,
                     max_noise_pct: float) -> tuple[dict, list[str]]:
    """A baseline combined from the runs of every group but `left_out` (None: every group), and
    the names of the runs it was made of, in group order."""
    others = [run for group, runs in groups.items() if group != left_out for run in runs]
    return combine([docs[run] for run in others], names=others, max_noise_pct=max_noise_pct), others


def leave_one_group_out(docs: Mapping[str, dict], groups: Mapping[str, Sequence[str]],
                        policy: GatePolicy) -> list[dict]:
    """Per run, in group order: its group, the runs its baseline was combined from, and the
    comparison's summary (counts per status) under `policy`."""
    rows = []
    for group, runs in groups.items():
        baseline, others = combined_without(docs, groups, group, policy.invalid_noise_pct)
        for run in runs:
            rows.append({"group": group, "run": run, "baseline_from": others,
                         "summary": compare(baseline, docs[run], policy).summary})
    return rows
