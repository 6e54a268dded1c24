#!/usr/bin/env bash
# Regenerates every file under samples/fresh138/ (a 138th batch of user-style programs:
# training steps with LAMB, LARS, Lion, Adafactor, Muon, SAM, EMA, per-layer clipping,
# multi_transform / MultiSteps and schedule-free AdamW on sharded parameters, written with
# optax or by hand, exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh138.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh138.py "$@"
