#!/usr/bin/env bash
# Regenerates every file under samples/fresh91/ (a 91st batch of user-style programs:
# models from dm-haiku, HuggingFace transformers' Flax models and penzai, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh91.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh91, made with Python 3.12 and installed from the pinned
# requirements-fresh91.txt (jax 0.12.0.1, optax, dm-haiku, transformers + flax, penzai) when
# missing or older than that file; FRESH91_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/venv.sh"
run_pinned_corpus fresh91 "jax, optax, haiku, transformers, flax, penzai" "$@"
