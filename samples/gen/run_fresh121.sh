#!/usr/bin/env bash
# Regenerates every file under samples/fresh121/ (a 121st batch of user-style programs:
# Flax NNX, Flax Linen and Equinox modules sharded as their docs do, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh121.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh121, made with Python 3.12 and installed from the pinned
# requirements-fresh121.txt (jax 0.12.0.1, optax, flax, equinox) when
# missing or older than that file; FRESH121_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/venv.sh"
py="${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}"
[ -x "$py" ] || py=python3.12
override="${FRESH121_VENV:-}"
if [ -z "$override" ] && [ -n "${SAMPLES_VENV:-}" ] &&
   "$SAMPLES_VENV/bin/python" -c "import flax, equinox, optax" 2>/dev/null; then
  override=$SAMPLES_VENV
fi
venv="${override:-$here/.venv-fresh121}"
ensure_venv "$venv" "$override" "$py" "$here/requirements-fresh121.txt" "jax, optax, flax, equinox" >&2
cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh121.py "$@"
