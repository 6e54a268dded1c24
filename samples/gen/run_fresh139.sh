#!/usr/bin/env bash
# Regenerates every file under samples/fresh139/ (a 139th batch of user-style programs:
# vision model training steps -- ViT, ConvNeXt, ResNet with synced BatchNorm, a diffusion
# UNet, spatial / patch / tensor parallelism -- written in plain JAX + optax, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh139.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh139.py "$@"
