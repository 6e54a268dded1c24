#!/usr/bin/env bash
# Regenerates every file under samples/fresh118/ (a 118th batch of user-style programs:
# HuggingFace transformers' Flax decoder LMs (OPT, GPT-J, GPT-Neo, BLOOM, XGLM, Gemma) and
# vision models (ViT, CLIP, BEiT, DINOv2, ResNet, RegNet) sharded by hand, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh118.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh118, made with Python 3.12 and installed from the pinned
# requirements-fresh118.txt (jax 0.12.0.1, optax, transformers 4.46.3 + flax 0.12.12) when
# missing or older than that file; FRESH118_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/venv.sh"
py="${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}"
[ -x "$py" ] || py=python3.12
override="${FRESH118_VENV:-}"
if [ -z "$override" ] && [ -n "${SAMPLES_VENV:-}" ] &&
   "$SAMPLES_VENV/bin/python" -c "import transformers, flax, optax" 2>/dev/null; then
  override=$SAMPLES_VENV
fi
venv="${override:-$here/.venv-fresh118}"
ensure_venv "$venv" "$override" "$py" "$here/requirements-fresh118.txt" "jax, optax, transformers, flax" >&2
cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh118.py "$@"
