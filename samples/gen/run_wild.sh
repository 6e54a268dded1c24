#!/usr/bin/env bash
# Regenerates samples/wild/ (GSPMD pairs of models from maintained libraries, and
# samples/wild/manifest.json) on 8 CPU devices, in three virtualenvs made from
# Python 3.12 with pip (each installed from its pinned requirements file when missing
# or older than that file):
#   main      samples/gen/.venv-wild          requirements-wild.txt           linen nnx keras eqx
#   maxtext   samples/gen/.venv-wild-maxtext  requirements-wild-maxtext.txt   maxtext
#   torchxla  samples/gen/.venv-wild-torchxla requirements-wild-torchxla.txt  torchxla
# Usage: bash samples/gen/run_wild.sh [--only SUBSTR]... [--no-numerics]
# WILD_PARTS="main maxtext torchxla" picks the parts (default all three);
# WILD_VENV / WILD_VENV_MAXTEXT / WILD_VENV_TORCHXLA use existing virtualenvs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py="${WILD_PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python}"
[ -x "$py" ] || py=python3.12

venv() {  # venv DIR REQUIREMENTS PROBE_IMPORTS EXPLICIT -> prints DIR when ready
  local dir=$1 req=$2 probe=$3 explicit=$4
  [ -x "$dir/bin/python" ] || "$py" -m venv "$dir" >&2
  if ! "$dir/bin/python" -c "import $probe" 2>/dev/null ||
     { [ -z "$explicit" ] && [ "$req" -nt "$dir/.installed" ]; }; then
    "$dir/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
    touch "$dir/.installed"
  fi
  echo "$dir"
}

cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export KERAS_BACKEND=jax
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
# Load the exporter under its repo-relative name so HLO source paths are relative.
boot='
import sys
sys.argv = ["samples/gen/wild.py"] + sys.argv[1:]
exec(compile(open("samples/gen/wild.py").read(), "samples/gen/wild.py", "exec"), {"__name__": "__main__"})
'
for part in ${WILD_PARTS:-main maxtext torchxla}; do
  case $part in
    main)
      v=$(venv "${WILD_VENV:-$here/.venv-wild}" "$here/requirements-wild.txt" \
               "jax, flax, keras_hub, equinox" "${WILD_VENV:-}")
      WILD_FAMILIES=linen,nnx,keras,eqx "$v/bin/python" -c "$boot" "$@" ;;
    maxtext)
      v=$(venv "${WILD_VENV_MAXTEXT:-$here/.venv-wild-maxtext}" "$here/requirements-wild-maxtext.txt" \
               "jax, maxtext" "${WILD_VENV_MAXTEXT:-}")
      WILD_FAMILIES=maxtext "$v/bin/python" -c "$boot" "$@" ;;
    torchxla)
      v=$(venv "${WILD_VENV_TORCHXLA:-$here/.venv-wild-torchxla}" "$here/requirements-wild-torchxla.txt" \
               "torch, torch_xla" "${WILD_VENV_TORCHXLA:-}")
      env -u XLA_FLAGS "$v/bin/python" samples/gen/wild_torchxla.py "$@" ;;
    *) echo "run_wild.sh: unknown part '$part' (main, maxtext, torchxla)" >&2; exit 2 ;;
  esac
done
