#!/usr/bin/env bash
# Regenerates every file under samples/fresh94/ (a 94th batch of user-style programs:
# models from haliax, jraph, rlax, distrax and optax.contrib, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh94.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh94, made with Python 3.12 and installed from the pinned
# requirements-fresh94.txt (jax 0.12.0.1, optax, haliax, jraph, rlax, distrax) when
# missing or older than that file; FRESH94_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/venv.sh"
export PYTHONWARNINGS=ignore::UserWarning  # equinox.static_field deprecations from haliax
run_pinned_corpus fresh94 "jax, optax, jraph, rlax, distrax, haliax" "$@"
