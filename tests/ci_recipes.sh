#!/bin/bash
# Runs the make and scalify lines of docs/CI.md as written, on the sample
# corpus, in a temporary folder laid out as the recipes assume (hlo/ holds the
# pairs and their manifest, scalify-src/ the source tree), with the CI
# variables set to stand-ins. The tooling suite checks that every such line
# of docs/CI.md occurs here verbatim, and runs this script.
#
#   tests/ci_recipes.sh          (BUILD: the build folder to install from, default build)
#
# Exits non-zero, naming the step, when a step fails or produces less than
# the recipe relies on.
set -u
R=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export BUILD="${BUILD:-build}"
export HOME="$W/home"
mkdir -p "$HOME"
cd "$W" || exit 1
ln -s "$R" scalify-src
ln -s "$R/samples" hlo
# the source files the samples' metadata names (samples/gen/*.py), inside the
# source root as a repository's own would be
mkdir -p samples/gen && cp "$R"/samples/gen/*.py samples/gen/

fail() {
    echo "ci_recipes: $*" >&2
    exit 1
}

# ---- GitHub Actions ----
export GITHUB_OUTPUT="$W/github-output" GITHUB_STEP_SUMMARY="$W/step-summary"
export SOURCE_URL="https://github.com/org/repo/blob/0123abc" SITE_URL=""
make -C scalify-src -j2 install PREFIX="$HOME/.local" >/dev/null || fail "github: make install"
export PATH="$HOME/.local/bin:$PATH"
[ "$(command -v scalify)" = "$HOME/.local/bin/scalify" ] || fail "github: scalify is not the installed one"
scalify --version | grep -q "share/scalify/rules (" || fail "github: installed rules not found"
rc=0
scalify check --manifest hlo/manifest.json --out-dir out --source-root . || rc=$?
echo "rc=$rc" >> "$GITHUB_OUTPUT"
scalify report out/index.json -o site --markdown summary.md --site-url "$SITE_URL" --source-url "$SOURCE_URL" ||
    fail "github: report"
cat summary.md >> "$GITHUB_STEP_SUMMARY"
grep -qx "rc=1" "$GITHUB_OUTPUT" || fail "github: the corpus's bugs should make check exit 1 (got $rc)"
for f in site/index.html site/results.sarif site/junit.xml site/summary.json; do
    [ -s "$f" ] || fail "github: $f missing"
done
grep -q '^## scalify report: ' summary.md || fail "github: summary.md has no headline"
grep -q '](https://github.com/org/repo/blob/0123abc/samples/gen/' summary.md || fail "github: no source link"
grep -q '^Full report: \[index.html\](index.html)$' summary.md || fail "github: the site link is not relative"
rm -rf out site summary.md

# ---- GitLab CI: three parallel shards, then the report job ----
export CI_NODE_TOTAL=3 SOURCE_URL="https://gitlab.example.org/g/p/-/blob/0123abc"
for CI_NODE_INDEX in 1 2 3; do
    export CI_NODE_INDEX
    scalify check --manifest hlo/manifest.json --out-dir out --source-root . --shard "$((CI_NODE_INDEX - 1))/$CI_NODE_TOTAL" || test $? -eq 1 ||
        fail "gitlab: shard $CI_NODE_INDEX"
done
unset CI_NODE_INDEX CI_NODE_TOTAL
scalify report out/index.*-of-*.json -o site --merged-index out/index.json --markdown summary.md --site-url "$SITE_URL" --source-url "$SOURCE_URL" ||
    fail "gitlab: report"
grep -Eq '"verdict": "(mismatch|unverified|error)"' out/index.json || fail "gitlab: the verdict test finds no failing pair"
[ -s site/junit.xml ] || fail "gitlab: site/junit.xml missing"
# the merged index is what one unsharded run writes
scalify check --manifest hlo/manifest.json --out-dir one --source-root . 2>/dev/null
cmp -s one/index.json out/index.json || fail "gitlab: the merged index differs from one run's"
rm -rf out one site summary.md

# ---- Slurm: the array tasks, then the report job (sbatch runs the same bodies) ----
export SLURM_ARRAY_TASK_COUNT=8 SLURM_CPUS_PER_TASK=2
for SLURM_ARRAY_TASK_ID in 0 1 2 3 4 5 6 7; do
    export SLURM_ARRAY_TASK_ID
    scalify check --manifest hlo/manifest.json --out-dir out --source-root . --shard "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT" -j "$SLURM_CPUS_PER_TASK" 2>/dev/null
    [ $? -le 1 ] || fail "slurm: task $SLURM_ARRAY_TASK_ID"
done
scalify report out/index.*-of-8.json -o site --merged-index out/index.json --markdown summary.md || fail "slurm: report"
[ -s site/index.html ] && [ -s summary.md ] || fail "slurm: no site or summary"
# a task that died before writing its index stops the report
rm out/index.5-of-8.json
scalify report out/index.*-of-8.json -o site2 --markdown summary2.md 2>"$W/err" && fail "slurm: merged without shard 5"
grep -q "shard 5/8 is missing" "$W/err" || fail "slurm: the missing shard is not named"
[ ! -e summary2.md ] || fail "slurm: a partial summary was written"
echo "ci_recipes: ok"
