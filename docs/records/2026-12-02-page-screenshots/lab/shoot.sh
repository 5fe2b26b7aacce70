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
rm -rf "$W"
