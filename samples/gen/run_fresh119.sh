#!/usr/bin/env bash
# Regenerates every file under samples/fresh119/ (a 119th batch of user-style programs:
# Keras 3 / keras-hub models on the JAX backend and HuggingFace diffusers' Flax models,
# exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh119.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh119, made with Python 3.12 and installed from the pinned
# requirements-fresh119.txt (jax 0.12.0.1, optax, keras, keras-hub, diffusers 0.35.2, flax)
# when missing or older than that file; FRESH119_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/venv.sh"
py="${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}"
[ -x "$py" ] || py=python3.12
override="${FRESH119_VENV:-}"
if [ -z "$override" ] && [ -n "${SAMPLES_VENV:-}" ] &&
   KERAS_BACKEND=jax "$SAMPLES_VENV/bin/python" -c "import keras_hub, diffusers, flax" 2>/dev/null; then
  override=$SAMPLES_VENV
fi
venv="${override:-$here/.venv-fresh119}"
ensure_venv "$venv" "$override" "$py" "$here/requirements-fresh119.txt" "jax, optax, keras, keras_hub, diffusers, flax" >&2
cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export KERAS_BACKEND=jax
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh119.py "$@"
