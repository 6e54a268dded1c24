#!/usr/bin/env bash
# Regenerates every file under samples/fresh117/ (a 117th batch of user-style programs:
# HuggingFace transformers' Flax encoder-decoder and encoder models, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh117.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh117, made with Python 3.12 and installed from the pinned
# requirements-fresh117.txt (jax 0.12.0.1, optax, transformers + flax) when
# missing or older than that file; FRESH117_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/venv.sh"
run_pinned_corpus fresh117 "jax, optax, transformers, flax" "$@"
