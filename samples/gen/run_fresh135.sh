#!/usr/bin/env bash
# Regenerates every file under samples/fresh135/ (a 135th batch of user-style programs:
# HuggingFace transformers' Flax models earlier corpora did not use -- DistilBert, Albert,
# Llama, Mistral, BlenderbotSmall, RoFormer, Wav2Vec2 -- in training steps and forward passes,
# exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh135.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh135, made with Python 3.12 and installed from the pinned
# requirements-fresh135.txt (jax 0.12.0.1, optax, transformers + flax) when
# missing or older than that file; FRESH135_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/venv.sh"
run_pinned_corpus fresh135 "jax, optax, transformers, flax" "$@"
