#!/usr/bin/env bash
# Regenerates every file under samples/train/ (training-step HLO pairs, relations,
# manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_train.sh [--only SUBSTR]... [--no-numerics]
# Virtualenv and SAMPLES_VENV: see env312.sh.
set -euo pipefail
source "$(dirname "$0")/env312.sh"
# The pass dump is taken by the user-facing exporter, python/scalify_jax.
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
# Load the exporter under its repo-relative name so HLO source paths are relative.
exec "$venv/bin/python" -c '
import sys
sys.argv = ["samples/gen/train_export.py"] + sys.argv[1:]
exec(compile(open("samples/gen/train_export.py").read(), "samples/gen/train_export.py", "exec"), {"__name__": "__main__"})
' "$@"
