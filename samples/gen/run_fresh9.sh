#!/usr/bin/env bash
# Regenerates every file under samples/fresh9/ (a ninth batch of user-style programs,
# exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh9.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt); the
# dm-haiku pair also needs requirements-fresh9.txt, installed with --no-deps into
# samples/gen/.fresh9-extra (FRESH9_EXTRA=DIR for another folder) beside that
# virtualenv, so jax itself is not changed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
extra="${FRESH9_EXTRA:-$here/.fresh9-extra}"
if ! PYTHONPATH="$extra" "$venv/bin/python" -c "import haiku" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --no-deps --target "$extra" -r "$here/requirements-fresh9.txt"
fi
export PYTHONPATH="$repo/python:$extra${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh9.py "$@"
