#!/usr/bin/env bash
# Regenerates tests/cases/interp/jax-topk.* (see samples/gen/topk_case.py).
# Usage: JAX_VENV=DIR bash samples/gen/topk_case.sh, DIR a virtualenv with jax
# and jaxlib (jax 0.12 wrote the committed files).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${JAX_VENV:?set JAX_VENV to a virtualenv with jax and jaxlib}"
cd "$repo"
export JAX_PLATFORMS=cpu PYTHONHASHSEED=0
exec "$venv/bin/python" "$here/topk_case.py"
