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

source "$here/venv.sh"

cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export KERAS_BACKEND=jax
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
# python/scalify_jax: the pass dumps and the meshes of wild.py.
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
for part in ${WILD_PARTS:-main maxtext torchxla}; do
  case $part in
    main)
      v=${WILD_VENV:-$here/.venv-wild}
      ensure_venv "$v" "${WILD_VENV:-}" "$py" "$here/requirements-wild.txt" "jax, flax, keras_hub, equinox" >&2
      WILD_FAMILIES=linen,nnx,keras,eqx run_repo_script "$v" samples/gen/wild.py "$@" ;;
    maxtext)
      v=${WILD_VENV_MAXTEXT:-$here/.venv-wild-maxtext}
      ensure_venv "$v" "${WILD_VENV_MAXTEXT:-}" "$py" "$here/requirements-wild-maxtext.txt" "jax, maxtext" >&2
      WILD_FAMILIES=maxtext run_repo_script "$v" samples/gen/wild.py "$@" ;;
    torchxla)
      v=${WILD_VENV_TORCHXLA:-$here/.venv-wild-torchxla}
      ensure_venv "$v" "${WILD_VENV_TORCHXLA:-}" "$py" "$here/requirements-wild-torchxla.txt" "torch, torch_xla" >&2
      env -u XLA_FLAGS "$v/bin/python" samples/gen/wild_torchxla.py "$@" ;;
    *) echo "run_wild.sh: unknown part '$part' (main, maxtext, torchxla)" >&2; exit 2 ;;
  esac
done
