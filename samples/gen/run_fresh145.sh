#!/usr/bin/env bash
# Regenerates every file under samples/fresh145/ (a 145th batch of user-style programs:
# graph neural networks (GCN, GraphSAGE, GAT, GIN readout) and recommender models (DLRM embedding
# bags, row- / table-wise sharded tables, two-tower retrieval) and their training steps in plain JAX +
# optax, exported with python/scalify_jax, manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh145.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh145.py "$@"
