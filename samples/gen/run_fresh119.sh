#!/usr/bin/env bash
# Regenerates every file under samples/fresh119/ (a 119th batch of user-style programs:
# Keras 3 / keras-hub models on the JAX backend and HuggingFace diffusers' Flax models,
# exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh119.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh119, made with Python 3.12 and installed from the pinned
# requirements-fresh119.txt (jax 0.12.0.1, optax, keras, keras-hub, diffusers 0.35.2, flax)
# when missing or older than that file; FRESH119_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/venv.sh"
export KERAS_BACKEND=jax
run_pinned_corpus fresh119 "jax, optax, keras, keras_hub, diffusers, flax" "$@"
