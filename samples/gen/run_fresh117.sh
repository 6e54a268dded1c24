#!/usr/bin/env bash
# Regenerates every file under samples/fresh117/ (a 117th batch of user-style programs:
# HuggingFace transformers' Flax encoder-decoder and encoder models, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh117.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh117, made with Python 3.12 and installed from the pinned
# requirements-fresh117.txt (jax 0.12.0.1, optax, transformers + flax) when
# missing or older than that file; FRESH117_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/venv.sh"
py="${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}"
[ -x "$py" ] || py=python3.12
override="${FRESH117_VENV:-}"
if [ -z "$override" ] && [ -n "${SAMPLES_VENV:-}" ] &&
   "$SAMPLES_VENV/bin/python" -c "import transformers, flax, optax" 2>/dev/null; then
  override=$SAMPLES_VENV
fi
venv="${override:-$here/.venv-fresh117}"
ensure_venv "$venv" "$override" "$py" "$here/requirements-fresh117.txt" "jax, optax, transformers, flax" >&2
cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh117.py "$@"
