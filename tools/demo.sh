#!/bin/sh
# make demo: check every bundled sample pair and render the results into site/.
#   1. scalify check --manifest samples/manifest.json  → build/traces/*.trace.json
#   2. scalify report build/traces/*.trace.json         → site/ (index.html, SARIF, JUnit)
# check exits 1 when any pair is a mismatch or unverified: that is the demo's
# content, not a failure of the demo.
set -u
bin=${1:-build/scalify}
rm -rf build/traces
"$bin" check --manifest samples/manifest.json --out-dir build/traces --source-root .
rc=$?
if [ "$rc" -ge 2 ]; then
    echo "demo: scalify check failed (exit $rc)" >&2
    exit 1
fi
rm -rf site
"$bin" report build/traces/*.trace.json -o site --title "scalify: the sample corpus" || exit 1
python3 - 2>/dev/null <<'PY' || true
import json
idx = json.load(open("build/traces/index.json"))["pairs"]
from collections import Counter
c = Counter((p["expected"], p["verdict"]) for p in idx)
print("demo: %d pairs checked: " % len(idx) + ", ".join("%s→%s %d" % (e, v, n) for (e, v), n in sorted(c.items())))
PY
echo "demo: open site/index.html"
