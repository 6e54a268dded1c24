# Sourced by run_train.sh and run_probe.sh (JAX 0.12 exports): the virtualenv
# with the pinned requirements-train.txt, then cd to the repository and the
# environment the exports need. Sets here, repo, venv.
# SAMPLES_VENV=DIR uses an existing virtualenv with the pinned packages instead of
# samples/gen/.venv312 (made with Python 3.12; only installed into when jax does not import).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/venv.sh"
venv="${SAMPLES_VENV:-$here/.venv312}"
ensure_venv "$venv" "${SAMPLES_VENV:-}" "${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}" \
  "$here/requirements-train.txt" jax,optax
cd "$repo"
# Must be set before jax is imported: 8 CPU devices for the meshes.
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=cpu
export PYTHONHASHSEED=0
