#!/usr/bin/env bash
# Regenerates every committed file under samples/ (HLO pairs, relations, io files,
# manifest.json) with JAX/XLA on CPU. Usage: bash samples/gen/run.sh [--only SUBSTR]... [--no-numerics]
# SAMPLES_VENV=DIR uses an existing virtualenv with the pinned packages instead of
# samples/gen/.venv (it is only installed into when jax does not import).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/venv.sh"
venv="${SAMPLES_VENV:-$here/.venv}"
ensure_venv "$venv" "${SAMPLES_VENV:-}" python3 "$here/requirements.txt" jax
cd "$repo"
# Must be set before jax is imported: 64 CPU devices for the meshes (tp up to 64).
export XLA_FLAGS="--xla_force_host_platform_device_count=64"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
# python/scalify_jax: the pass dumps, the mesh, the relations views.
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/export.py "$@"
