"""The nightly baseline refresh (job kind 4 of docs/architecture.md): re-measure, check the measurement is fit
to become a baseline, and put the new baselines on a new branch with a pull-request description.

  core.py        refresh(request, measure_fn, ...) -> RefreshResult; the refusal rules
  clean_tree.py  whether the working tree is HEAD's (a baseline is stored as HEAD's measurement)
  measurers.py   the measure functions of a refresh measuring here (refuses a tree not HEAD's)
  measured_code.py  whether documents measured elsewhere timed HEAD's code
  remeasure.py   which shapes a run caught disturbed, and splicing their re-measurement in
  branch.py      the one-commit branch made in a throw-away `git worktree` (the checkout and its
                 branch are never touched; an interrupted refresh leaves nothing behind)
  report.py      the pull-request body: old vs new per shape, what moved, both provenances

`mha-ci perf refresh` (mha_ci.commands.perf) calls `refresh()` with the measurers' functions,
or, given `--measurement TOOLCHAIN=FILE`, with documents measured already (on a GPU machine);
the refresh job kind (mha_ci.jobs.refresh) calls it for one toolchain.
"""
from mha_ci.refresh.core import RefreshRefused, RefreshResult, refresh

__all__ = ["RefreshRefused", "RefreshResult", "refresh"]
