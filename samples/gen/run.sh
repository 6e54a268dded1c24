#!/usr/bin/env bash
# Regenerates every committed file under samples/ (HLO pairs, relations, io files,
# manifest.json) with JAX/XLA on CPU. Usage: bash samples/gen/run.sh [--only SUBSTR]... [--no-numerics]
# SAMPLES_VENV=DIR uses an existing virtualenv with the pinned packages instead of
# samples/gen/.venv (it is only installed into when jax does not import).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${SAMPLES_VENV:-$here/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import jax' 2>/dev/null ||
   { [ -z "${SAMPLES_VENV:-}" ] && [ "$here/requirements.txt" -nt "$venv/.installed" ]; }; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  touch "$venv/.installed"
fi
cd "$repo"
# Must be set before jax is imported: 64 CPU devices for the meshes (tp up to 64).
export XLA_FLAGS="--xla_force_host_platform_device_count=64"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
# Load the exporter under its repo-relative name so HLO source paths are relative.
exec "$venv/bin/python" -c '
import sys
sys.argv = ["samples/gen/export.py"] + sys.argv[1:]
exec(compile(open("samples/gen/export.py").read(), "samples/gen/export.py", "exec"), {"__name__": "__main__"})
' "$@"
