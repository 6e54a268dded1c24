#!/usr/bin/env bash
# Regenerates every file under samples/probe/ (small GSPMD and shard_map pairs,
# relations, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_probe.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt).
set -euo pipefail
source "$(dirname "$0")/env312.sh"
# The pass dump is taken by the user-facing exporter, python/scalify_jax.
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/probe.py "$@"
