#!/usr/bin/env bash
# Regenerates every file under samples/fresh131/ (a 131st batch of user-style programs:
# pipeline parallelism -- GPipe, micro-batched, pp x dp, pp x tp, lax.switch stages, optax.adam,
# fori_loop / scan schedules, circular pipelines, GSPMD rolled stage stacks -- exported with
# python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh131.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh131.py "$@"
