#!/usr/bin/env bash
# Regenerates every file under samples/fresh142/ (a 142nd batch of user-style programs:
# input / output layers and losses of training steps (vocab-parallel embedding and cross-entropy, tied
# embeddings, label smoothing, z-loss, masked-LM, CLIP contrastive, in-batch negatives, class weights) in
# plain JAX + optax, exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh142.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh142.py "$@"
