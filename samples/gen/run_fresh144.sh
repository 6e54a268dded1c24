#!/usr/bin/env bash
# Regenerates every file under samples/fresh144/ (a 144th batch of user-style programs:
# generative-model training steps (DDPM / v-prediction losses, DiT adaLN-Zero blocks, classifier-free
# guidance, VAE, EMA, GAN, min-SNR weights) in plain JAX + optax, exported with python/scalify_jax,
# manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh144.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh144.py "$@"
