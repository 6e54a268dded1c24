#!/usr/bin/env bash
# Regenerates every file under samples/fresh125/ (a 125th batch of user-style programs:
# causal-LM training steps ported from HuggingFace / PyTorch to JAX -- shifted labels,
# ignore_index -100, padding masks, packed sequences, global token counts, gradient
# accumulation, adamw + clipping -- exported with python/scalify_jax, manifest.json)
# with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh125.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh125.py "$@"
