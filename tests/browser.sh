#!/bin/sh
# Browser check of a rendered report: opens every page of SITE from file:// in
# headless Chromium with JavaScript on, checks that the script ran under the
# page's CSP (data-js="ok"), that no error was raised (data-js-error) and that the
# console logged no error; saves a screenshot of each page under OUT.
#
#   tests/browser.sh SITE_DIR [OUT_DIR]      (default OUT_DIR build/screenshots)
#
# Installs chromium with apt-get when root and missing; otherwise prints SKIP and
# exits 0. Exit 1 when a page fails.
set -u
site=${1:?usage: tests/browser.sh SITE_DIR [OUT_DIR]}
out=${2:-build/screenshots}
browser=""
for b in chromium chromium-browser google-chrome; do
    command -v "$b" >/dev/null 2>&1 && { browser=$b; break; }
done
if [ -z "$browser" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "browser: installing chromium (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; }
    command -v chromium >/dev/null 2>&1 && browser=chromium
fi
if [ -z "$browser" ]; then
    echo "SKIP browser test: no chromium (install it: apt-get install chromium)"
    exit 0
fi
mkdir -p "$out"
abs_site=$(cd "$site" && pwd)
fail=0
n=0
for page in "$abs_site"/*.html; do
    [ -e "$page" ] || continue
    name=$(basename "$page" .html)
    prof=$(mktemp -d)
    flags="--headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run
           --disable-extensions --disable-sync --no-default-browser-check --hide-scrollbars
           --user-data-dir=$prof"
    # 1. DOM after scripts ran, plus the console log on stderr.
    # shellcheck disable=SC2086
    timeout 60 "$browser" $flags --enable-logging=stderr --v=0 --virtual-time-budget=2000 \
        --dump-dom "file://$page" >"$out/$name.dom" 2>"$out/$name.log"
    # On a loaded machine the DOM is sometimes dumped before the deferred script
    # ran; one retry with more virtual time tells that from a real failure.
    if ! grep -q 'data-js="ok"' "$out/$name.dom"; then
        # shellcheck disable=SC2086
        timeout 60 "$browser" $flags --enable-logging=stderr --v=0 --virtual-time-budget=10000 \
            --dump-dom "file://$page" >"$out/$name.dom" 2>"$out/$name.log"
    fi
    # 2. Screenshot (1280 wide, tall enough for most pages).
    # shellcheck disable=SC2086
    timeout 60 "$browser" $flags --window-size=1280,2000 --virtual-time-budget=2000 \
        --screenshot="$out/$name.png" "file://$page" >/dev/null 2>&1
    rm -rf "$prof"
    n=$((n + 1))
    problem=""
    grep -q 'data-js="ok"' "$out/$name.dom" || problem="$problem script did not run (CSP hash?);"
    grep -q 'data-js-error=' "$out/$name.dom" && problem="$problem JS error: $(grep -o 'data-js-error="[^"]*"' "$out/$name.dom");"
    if grep -E 'CONSOLE|Refused to|Content Security Policy' "$out/$name.log" | grep -qiE 'error|refused|violat'; then
        problem="$problem console: $(grep -E 'CONSOLE|Refused|Content Security' "$out/$name.log" | head -3 | tr '\n' ' ');"
    fi
    [ -s "$out/$name.png" ] || problem="$problem no screenshot;"
    if [ -n "$problem" ]; then
        echo "FAIL browser $name:$problem"
        fail=1
    fi
done
echo "browser: $n pages checked with $browser, screenshots in $out"
exit $fail
