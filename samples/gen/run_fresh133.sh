#!/usr/bin/env bash
# Regenerates every file under samples/fresh133/ (a 133rd batch of user-style programs:
# complete training steps on three-axis 2 x 2 x 2 meshes -- dp x fsdp x tp, dp x sp x tp,
# dp x ep x tp, pp x dp x tp -- in shard_map and GSPMD, exported with python/scalify_jax,
# manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh133.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh133.py "$@"
