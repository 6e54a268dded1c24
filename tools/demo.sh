#!/bin/sh
# make demo: read every bundled sample with scalify and write the results to site/.
# (The verifier and the HTML report are not built yet; until they are, the demo
# shows what the readers see: one inspect summary per sample file.)
set -eu
bin=${1:-build/scalify}
out=site
mkdir -p "$out.tmp"
n=0
for f in $(find samples -name '*.hlo' -o -name '*.hlo.gz' -o -name '*.hlo.pb' -o -name '*.hlo.pb.gz' | sort); do
    name=$(echo "$f" | sed 's|/|_|g')
    "$bin" inspect "$f" > "$out.tmp/$name.txt"
    n=$((n + 1))
done
rm -rf "$out" && mv "$out.tmp" "$out"
echo "demo: read $n sample files; summaries in $out/"
