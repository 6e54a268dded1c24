#!/usr/bin/env bash
# Regenerates tests/cases/jax012/ with a current JAX (see samples/gen/jax012.py).
# Usage: JAX012_VENV=DIR bash samples/gen/jax012.sh, where DIR is a virtualenv
# with jax, jaxlib and optax (jax 0.12 wrote the committed files).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${JAX012_VENV:?set JAX012_VENV to a virtualenv with jax 0.12, jaxlib and optax}"
cd "$repo"
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
# python/scalify_jax (the pass dump, the mesh, the relations document).
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
source "$here/venv.sh"
run_repo_script "$venv" samples/gen/jax012.py
