#!/usr/bin/env bash
# Regenerates samples/torchxla/ (GSPMD pairs written by PyTorch/XLA SPMD on 8 CPU
# devices, and samples/torchxla/manifest.json).
# Usage: bash samples/gen/run_torchxla.sh
# TORCHXLA_VENV=DIR uses an existing virtualenv with the pinned packages instead of
# samples/gen/.venv-torchxla (made from Python 3.12 and installed from
# requirements-torchxla.txt when missing or older than that file; torch from PyPI
# brings its CUDA runtime wheels, about 7 GB, though only the CPU is used).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/venv.sh"
venv="${TORCHXLA_VENV:-$here/.venv-torchxla}"
py="${TORCHXLA_PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python}"
[ -x "$py" ] || py=python3.12
ensure_venv "$venv" "${TORCHXLA_VENV:-}" "$py" "$here/requirements-torchxla.txt" torch,torch_xla
cd "$repo"
dump="samples/gen/.dump-torchxla"
rm -rf "$dump"
mkdir -p "$dump"
# Read once when torch_xla loads: the PJRT CPU client with 8 devices (torch_xla takes
# the count from CPU_NUM_DEVICES, not from --xla_force_host_platform_device_count) and
# the dump of every compiled module before optimization and around spmd-partitioning.
export PJRT_DEVICE=CPU
export CPU_NUM_DEVICES=8
export TORCHXLA_DUMP="$dump"
export XLA_FLAGS="--xla_dump_to=$dump --xla_dump_hlo_as_text --xla_dump_hlo_as_proto --xla_dump_hlo_pass_re=spmd-partitioning"
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=3
status=0
"$venv/bin/python" samples/gen/torchxla.py || status=$?
rm -rf "$dump"
exit $status
