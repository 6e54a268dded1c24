#!/usr/bin/env bash
# Regenerates every file under samples/fresh141/ (a 141st batch of user-style programs:
# sequence / context parallelism in transformers -- Megatron-SP, DeepSpeed-Ulysses, ring and zig-zag
# ring attention, all-gather-KV context parallelism, the sequence-sharded LM loss, RoPE offsets, training
# steps -- in plain JAX + optax, exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh141.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh141.py "$@"
