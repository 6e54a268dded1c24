#!/usr/bin/env bash
# Regenerates every file under samples/fresh137/ (a 137th batch of user-style programs:
# reinforcement-learning training steps in JAX + optax -- PPO, GAE by reverse scan with the
# envs or time sharded, GRPO for a tiny LM, REINFORCE with a running baseline, double-DQN
# with the actions over tp, Gumbel-argmax actor-critic -- exported with python/scalify_jax,
# manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_fresh137.sh [SUBSTR]...   (only pairs whose name has a SUBSTR)
# Virtualenv and SAMPLES_VENV: see env312.sh (the pins of requirements-train.txt: jax, optax);
# no other package is needed.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
run_repo_script "$venv" samples/gen/fresh137.py "$@"
