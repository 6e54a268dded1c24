#!/usr/bin/env bash
# Regenerates samples/bigtrain/ (one Llama-3.1-405B-shaped Flax Linen training step,
# FSDP x TP on 64 CPU devices, and samples/bigtrain/manifest.json).
# Usage: bash samples/gen/run_bigtrain.sh [--layers N]
# WILD_VENV=DIR uses an existing virtualenv with the pinned packages of
# requirements-wild.txt (default: samples/gen/.venv-wild, as run_wild.sh makes it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${WILD_VENV:-$here/.venv-wild}"
[ -x "$venv/bin/python" ] || { echo "no virtualenv at $venv: run samples/gen/run_wild.sh first or set WILD_VENV" >&2; exit 2; }
cd "$repo"
# Must be set before jax is imported: 64 CPU devices for the mesh.
export XLA_FLAGS="--xla_force_host_platform_device_count=64"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
export PYTHONDONTWRITEBYTECODE=1
# python/scalify_jax: the pass dump and the mesh.
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
source "$here/venv.sh"
run_repo_script "$venv" samples/gen/bigtrain.py "$@"
