#!/bin/sh
# Nu Html Checker (vnu) on HTML files: prints its errors, exits 1 when there
# are any, 0 when every file is valid.
#
#   tests/vnu.sh FILE...
#
# Uses $VNU_JAR, else build/vnu/node_modules/vnu-jar/build/dist/vnu.jar,
# installing it there from npm (package vnu-jar) when npm is present. Without
# Java, or without the jar and npm, prints SKIP and exits 0.
set -u
for f in "$@"; do [ -f "$f" ] || { echo "vnu: no file $f"; exit 1; }; done
command -v java >/dev/null 2>&1 || { echo "SKIP vnu: no java"; exit 0; }
jar=${VNU_JAR:-build/vnu/node_modules/vnu-jar/build/dist/vnu.jar}
if [ ! -f "$jar" ] && [ -z "${VNU_JAR:-}" ] && command -v npm >/dev/null 2>&1; then
    echo "vnu: installing vnu-jar (npm) into build/vnu"
    mkdir -p build/vnu && (cd build/vnu && npm install --no-audit --no-fund --silent vnu-jar >/dev/null 2>&1)
fi
[ -f "$jar" ] || { echo "SKIP vnu: no vnu.jar (npm install vnu-jar, or set VNU_JAR)"; exit 0; }
out=$(java -jar "$jar" --errors-only "$@" 2>&1)
rc=$?
if [ -n "$out" ] || [ "$rc" -ne 0 ]; then
    printf '%s\n' "$out" | head -40
    echo "vnu: $(printf '%s\n' "$out" | grep -c 'error:') errors"
    exit 1
fi
echo "vnu: $# files valid"
exit 0
