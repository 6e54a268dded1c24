#!/usr/bin/env bash
# Regenerates every file under samples/train/ (training-step HLO pairs, relations,
# manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_train.sh [--only SUBSTR]... [--no-numerics]
# Virtualenv and SAMPLES_VENV: see env312.sh.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
# The pass dump is taken by the user-facing exporter, python/scalify_jax.
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/train_export.py "$@"
