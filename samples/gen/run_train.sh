#!/usr/bin/env bash
# Regenerates every file under samples/train/ (training-step HLO pairs, relations,
# manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_train.sh [--only SUBSTR]... [--no-numerics]
# SAMPLES_VENV=DIR uses an existing virtualenv with the pinned packages instead of
# samples/gen/.venv312 (made with Python 3.12; only installed into when jax does not import).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${SAMPLES_VENV:-$here/.venv312}"
if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import jax, optax' 2>/dev/null ||
   { [ -z "${SAMPLES_VENV:-}" ] && [ "$here/requirements-train.txt" -nt "$venv/.installed" ]; }; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements-train.txt"
  touch "$venv/.installed"
fi
cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
# The pass dump is taken by the user-facing exporter, python/scalify_jax.
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
# Load the exporter under its repo-relative name so HLO source paths are relative.
exec "$venv/bin/python" -c '
import sys
sys.argv = ["samples/gen/train_export.py"] + sys.argv[1:]
exec(compile(open("samples/gen/train_export.py").read(), "samples/gen/train_export.py", "exec"), {"__name__": "__main__"})
' "$@"
