#!/usr/bin/env bash
# Regenerates every file under samples/fresh127/ (a 127th batch of user-style programs:
# segment / scatter reductions over sharded edges, ignore-index losses, token-shift halos
# and vocabulary-parallel policy log-probs, correct and buggy, exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh127.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh127.py "$@"
