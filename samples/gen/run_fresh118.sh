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
source "$here/venv.sh"
run_pinned_corpus fresh118 "jax, optax, transformers, flax" "$@"
