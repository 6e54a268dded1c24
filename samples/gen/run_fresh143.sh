#!/usr/bin/env bash
# Regenerates every file under samples/fresh143/ (a 143rd batch of user-style programs:
# recurrent and state-space models (LRU / S5 / Mamba / Mamba-2 / RG-LRU / RWKV-4 / LSTM / GRU /
# causal linear attention, sequence-parallel scans, training steps) in plain JAX + optax,
# exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh143.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh143.py "$@"
