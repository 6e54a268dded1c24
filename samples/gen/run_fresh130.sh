#!/usr/bin/env bash
# Regenerates every file under samples/fresh130/ (a 130th batch of user-style programs:
# convolutions with halos over a sharded time / height axis beside sharded channels, and
# vocabulary-parallel cross entropy picked by arange indexing or take_along_axis, exported
# with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh130.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh130.py "$@"
