#!/bin/sh
# axe-core accessibility check of report pages in headless Chromium: each
# page is copied with its Content-Security-Policy left out (axe runs as an
# inline script the policy would block) and axe-core appended; the
# violations axe finds are printed. Exit 1 when there is any.
#
#   tests/axe.sh FILE...
#
# Uses $AXE_JS, else build/vnu/node_modules/axe-core/axe.min.js, installing
# it there from npm (package axe-core) when npm is present. Without
# Chromium, or without axe-core and npm, prints SKIP and exits 0.
set -u
for f in "$@"; do [ -f "$f" ] || { echo "axe: no file $f"; exit 1; }; done
browser=""
for b in chromium chromium-browser google-chrome; do
    command -v "$b" >/dev/null 2>&1 && { browser=$b; break; }
done
[ -n "$browser" ] || { echo "SKIP axe: no chromium"; exit 0; }
axe=${AXE_JS:-build/vnu/node_modules/axe-core/axe.min.js}
if [ ! -f "$axe" ] && [ -z "${AXE_JS:-}" ] && command -v npm >/dev/null 2>&1; then
    echo "axe: installing axe-core (npm) into build/vnu"
    mkdir -p build/vnu && (cd build/vnu && npm install --no-audit --no-fund --silent axe-core >/dev/null 2>&1)
fi
[ -f "$axe" ] || { echo "SKIP axe: no axe-core (npm install axe-core, or set AXE_JS)"; exit 0; }
tmp=$(mktemp -d)
fail=0
for f in "$@"; do
    page="$tmp/$(basename "$f")"
    {
        sed -e '/http-equiv="Content-Security-Policy"/d' -e 's|</body>||' -e 's|</html>||' "$f"
        printf '<script>\n'
        cat "$axe"
        printf '\n</script><script>\n'
        printf 'axe.run(document, {resultTypes: ["violations"]}).then(function (r) {\n'
        printf '  var p = document.createElement("pre"); p.id = "axe-result";\n'
        printf '  p.textContent = "AXE:" + r.violations.map(function (v) { return v.id + " (" + v.impact + ", " + v.nodes.length + "): " + v.nodes[0].target.join(" "); }).join(" | ") + ":AXE";\n'
        printf '  document.body.appendChild(p); });\n</script></body></html>\n'
    } >"$page"
    prof=$(mktemp -d)
    out=$(timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run \
        --user-data-dir="$prof" --virtual-time-budget=20000 --dump-dom "file://$page" 2>/dev/null)
    rm -rf "$prof"
    res=$(printf '%s' "$out" | tr '\n' ' ' | sed -n 's/.*AXE:\(.*\):AXE.*/\1/p')
    if ! printf '%s' "$out" | grep -q 'AXE:'; then
        echo "axe: $(basename "$f"): axe did not finish"
        fail=1
    elif [ -n "$res" ]; then
        echo "axe: $(basename "$f"): $res"
        fail=1
    else
        echo "axe: $(basename "$f"): no violations"
    fi
done
rm -rf "$tmp"
exit $fail
