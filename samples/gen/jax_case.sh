#!/usr/bin/env bash
# Regenerates the interpreter's JAX-computed case tests/cases/interp/jax-NAME.*
# (samples/gen/NAME_case.py; NAME is topk or linalg), and
# tests/cases/accum-views (NAME accum).
# Usage: JAX_VENV=DIR bash samples/gen/jax_case.sh NAME, DIR a virtualenv
# with jax and jaxlib (jax 0.12 wrote the committed files).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${JAX_VENV:?set JAX_VENV to a virtualenv with jax and jaxlib}"
name="${1:?usage: jax_case.sh topk|linalg|accum}"
cd "$repo"
export JAX_PLATFORMS=cpu PYTHONHASHSEED=0
exec "$venv/bin/python" "$here/${name}_case.py"
