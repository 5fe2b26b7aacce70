# Both pinned toolchains (their mha-ci venvs); run from the repository root.
#   bash docs/records/2026-12-03-dq-reduce-ptx/lab/run.sh <triton-3.4 python> <triton-3.8 python>
for py in "$1" "$2"; do "$py" docs/records/2026-12-03-dq-reduce-ptx/lab/ptx.py 2>/dev/null; done \
  > docs/records/2026-12-03-dq-reduce-ptx/ptx-counts.txt
