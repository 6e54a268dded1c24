#!/usr/bin/env bash
# Regenerates every file under samples/fresh121/ (a 121st batch of user-style programs:
# Flax NNX, Flax Linen and Equinox modules sharded as their docs do, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh121.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv: samples/gen/.venv-fresh121, made with Python 3.12 and installed from the pinned
# requirements-fresh121.txt (jax 0.12.0.1, optax, flax, equinox) when
# missing or older than that file; FRESH121_VENV=DIR uses an existing virtualenv instead
# (SAMPLES_VENV=DIR too, when it has those packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/venv.sh"
run_pinned_corpus fresh121 "jax, optax, flax, equinox" "$@"
