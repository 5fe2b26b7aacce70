# Headless Chromium screenshots of the report pages, and the console messages each one logged.
# usage (from the checkout root, Debian's chromium installed): bash docs/records/2026-12-02-page-screenshots/lab/shoot.sh
set -u
HERE=docs/records/2026-12-02-page-screenshots
W=$(mktemp -d)
tar -C "$W" -xzf docs/records/2026-12-02-h200-numerics/raw/call4-acc-3.8.tgz
# the folder call 4's own run wrote (the archive also holds earlier calls' folders of that name)
COMPARE="$W/$(grep -o 'reports in /tmp/[^ ]*' "$W/acc.log" | tail -1 | cut -d/ -f3-)/compare.html"
HISTORY=$PWD/docs/records/2026-12-01-perf-history-example/index.html
CH="chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
    --disable-component-update --disable-sync --user-data-dir=$W/profile --enable-logging=stderr --v=0 --hide-scrollbars"
shoot() {  # shoot NAME WIDTHxHEIGHT FILE
  timeout 120 $CH --window-size="$2" --screenshot="$HERE/$1.png" "file://$3" 2> "$W/$1.log"
  local rc=$? n; n=$(grep -c ":CONSOLE" "$W/$1.log")
  echo "$1: chromium exit $rc, $n console message(s), $(stat -c %s "$HERE/$1.png" 2>/dev/null || echo no) bytes"
  grep ":CONSOLE" "$W/$1.log" | head -5
}
shoot compare-h200-planted-accuracy-loss 1500,2400 "$COMPARE"
shoot history 1500,2400 "$HISTORY"

# The summary.md of the H200 PR job with a planted config change (2026-12-02-h200-ab, call 4),
# rendered near GitHub's way (lab/summary.py; needs the `markdown` package: MD_PYTHON names a
# Python that has it), once as it opens and once with its <details> unfolded.
S=$(mktemp -d)
tar -C "$S" -xzf docs/records/2026-12-02-h200-ab/raw/call4-prjob-3.8.tgz r/prjob/summary.md r/prjob/results.json
# as the job wrote it (the renderer of its commit), and as this checkout renders its results.json
${MD_PYTHON:-python3} $HERE/lab/summary.py "$S/r/prjob/summary.md" "$S/summary-h200.html"
PYTHONPATH=src ${PYTHON:-python3} -c "import json, sys; from mha_ci.reports import summary
print(summary.render(json.load(open(sys.argv[1]))), end='')" "$S/r/prjob/results.json" > "$S/now.md"
${MD_PYTHON:-python3} $HERE/lab/summary.py "$S/now.md" "$S/summary.html"
shoot summary-h200-pr-job-as-written 1100,1500 "$S/summary-h200.html"
sed 's/<details>/<details open>/' "$S/summary.html" > "$S/summary-open.html"
shoot summary-h200-pr-job 1100,1500 "$S/summary.html"
shoot summary-h200-pr-job-unfolded 1100,1900 "$S/summary-open.html"
rm -rf "$S" "$W"
