#!/bin/sh
# Installs the Debian packages scalify needs, only those that are missing.
# Usage: tools/deps.sh [--check]   (--check: report and fail, install nothing)
set -u
PKGS="pkg-config libgraphviz-dev graphviz libcmark-dev libjansson-dev libprotobuf-c-dev protobuf-c-compiler libpng-dev zlib1g-dev libdeflate-dev"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
if [ "${1:-}" = "--check" ]; then
    echo "scalify: missing Debian packages:$missing (run 'make deps')" >&2
    exit 1
fi
if [ "$(id -u)" != "0" ]; then
    echo "scalify: missing Debian packages:$missing" >&2
    echo "scalify: install them as root: sudo apt-get install$missing" >&2
    exit 1
fi
echo "scalify: installing missing Debian packages:$missing"
export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when an install fails for want of them.
if ! apt-get install -y -q --no-install-recommends $missing; then
    apt-get update -q && apt-get install -y -q --no-install-recommends $missing || {
        echo "scalify: apt-get could not install:$missing" >&2
        exit 1
    }
fi
