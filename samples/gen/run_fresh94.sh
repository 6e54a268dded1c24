#!/usr/bin/env bash
# Regenerates every file under samples/fresh94/ (a 94th batch of user-style programs:
# models from haliax, jraph, rlax, distrax and optax.contrib, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh94.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh94, made with Python 3.12 and installed from the pinned
# requirements-fresh94.txt (jax 0.12.0.1, optax, haliax, jraph, rlax, distrax) when
# missing or older than that file; FRESH94_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/venv.sh"
py="${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}"
[ -x "$py" ] || py=python3.12
override="${FRESH94_VENV:-}"
if [ -z "$override" ] && [ -n "${SAMPLES_VENV:-}" ] &&
   "$SAMPLES_VENV/bin/python" -c "import haliax, jraph, rlax, distrax" 2>/dev/null; then
  override=$SAMPLES_VENV
fi
venv="${override:-$here/.venv-fresh94}"
ensure_venv "$venv" "$override" "$py" "$here/requirements-fresh94.txt" "jax, optax, jraph, rlax, distrax, haliax" >&2
cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
export PYTHONWARNINGS=ignore::UserWarning  # equinox.static_field deprecations from haliax
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh94.py "$@"
