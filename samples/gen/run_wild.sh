#!/usr/bin/env bash
# Regenerates samples/wild/ (GSPMD pairs of Flax / keras-hub / Equinox models and
# samples/wild/manifest.json) with JAX/XLA on 8 CPU devices.
# Usage: bash samples/gen/run_wild.sh [--only SUBSTR]... [--no-numerics]
# WILD_VENV=DIR uses an existing virtualenv with the pinned packages instead of
# samples/gen/.venv-wild (made from Python 3.12 and installed from
# requirements-wild.txt when missing or older than that file).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${WILD_VENV:-$here/.venv-wild}"
py="${WILD_PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python}"
[ -x "$py" ] || py=python3.12
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import jax, flax, keras_hub, equinox' 2>/dev/null ||
   { [ -z "${WILD_VENV:-}" ] && [ "$here/requirements-wild.txt" -nt "$venv/.installed" ]; }; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements-wild.txt"
  touch "$venv/.installed"
fi
cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export KERAS_BACKEND=jax
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
# Load the exporter under its repo-relative name so HLO source paths are relative.
exec "$venv/bin/python" -c '
import sys
sys.argv = ["samples/gen/wild.py"] + sys.argv[1:]
exec(compile(open("samples/gen/wild.py").read(), "samples/gen/wild.py", "exec"), {"__name__": "__main__"})
' "$@"
