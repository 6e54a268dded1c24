#!/usr/bin/env bash
# Regenerates every file under samples/fresh146/ (a 146th batch of user-style programs:
# training-loop machinery (dropout keys by jax.random and fold_in, Megatron RNG streams, f16 / bf16
# mixed precision with dynamic loss scaling, remat, gradient accumulation by scan and optax.MultiSteps,
# global-norm clipping over sharded and replicated leaves, decay masks, warmup-cosine schedules,
# metrics reduced across devices) in plain JAX + optax,
# exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh146.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh146.py "$@"
