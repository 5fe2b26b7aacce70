"""The nightly baseline refresh (job kind 4 of docs/architecture.md): re-measure, check the measurement is fit
to become a baseline, and put the new baselines on a new branch with a pull-request description.

  core.py        refresh(pipeline, arch, measure_fn, ...) -> RefreshResult; the refusal rules
  remeasure.py   which shapes a run caught disturbed, and splicing their re-measurement in
  branch.py      the one-commit branch made in a throw-away `git worktree` (the checkout and its
                 branch are never touched; an interrupted refresh leaves nothing behind)
  report.py      the pull-request body: old vs new per shape, what moved, both provenances

`mha-ci perf refresh` (mha_ci.commands.perf) calls `refresh()` with the perf measure function,
or, given `--measurement TOOLCHAIN=FILE`, with documents measured already (on a GPU machine);
the refresh job kind (mha_ci.jobs.refresh) calls it for one toolchain.
"""
from mha_ci.refresh.core import RefreshRefused, RefreshResult, refresh

__all__ = ["RefreshRefused", "RefreshResult", "refresh"]
