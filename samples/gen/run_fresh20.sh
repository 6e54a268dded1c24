#!/usr/bin/env bash
# Regenerates every file under samples/fresh20/ (a twentieth batch of user-style programs:
# mixture-of-experts layers and their training -- token-choice and expert-choice routing,
# capacities and dropping, sort-based dispatch, shared experts, load-balancing losses,
# expert parallelism by all_to_all on ep x dp and ep x tp meshes -- exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh20.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh20.py "$@"
