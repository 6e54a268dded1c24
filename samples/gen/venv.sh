# Sourced by the exporters' run scripts: one virtualenv per pinned requirements file.
#
# ensure_venv VENV OVERRIDE PYTHON REQUIREMENTS MODULES
#   makes VENV with PYTHON when it has no python, and installs REQUIREMENTS into
#   it when MODULES (a comma-separated Python import list) do not import, or —
#   unless OVERRIDE is non-empty (the user named an existing virtualenv) — when
#   REQUIREMENTS is newer than the last install.
ensure_venv() {
  local venv=$1 override=$2 py=$3 reqs=$4 modules=$5
  if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
  fi
  if ! "$venv/bin/python" -c "import $modules" 2>/dev/null ||
     { [ -z "$override" ] && [ "$reqs" -nt "$venv/.installed" ]; }; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$reqs"
    touch "$venv/.installed"
  fi
}

# run_repo_script VENV SCRIPT [ARG]...
#   runs SCRIPT (a path relative to the repository, the current directory) under
#   its repo-relative name, so that the HLO source paths it records are relative;
#   returns its exit status.
run_repo_script() {
  local venv=$1 script=$2
  shift 2
  "$venv/bin/python" -c '
import sys
script = sys.argv[1]
sys.argv = [script] + sys.argv[2:]
exec(compile(open(script).read(), script, "exec"), {"__name__": "__main__"})
' "$script" "$@"
}

# run_pinned_corpus NAME MODULES [ARG]...
#   regenerates samples/NAME with samples/gen/NAME.py under the virtualenv
#   samples/gen/.venv-NAME, made with Python 3.12 ($PYTHON312, else pyenv's
#   3.12.1, else python3.12) from the pinned requirements-NAME.txt when MODULES
#   (a comma-separated import list) do not import or the file is newer than the
#   last install. ${NAME}_VENV (upper case: FRESH117_VENV) names an existing
#   virtualenv instead, and so does SAMPLES_VENV when MODULES import there. The
#   exporter runs on 8 CPU devices, offline (no weights are downloaded); ARGs
#   go to it (SUBSTRs of the pair names to export). Extra environment a
#   library needs (KERAS_BACKEND) is the caller's to export first.
run_pinned_corpus() {
  local name=$1 modules=$2
  shift 2
  local gen repo py venv override var
  gen=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  repo=$(cd "$gen/../.." && pwd)
  py="${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}"
  [ -x "$py" ] || py=python3.12
  var="$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')_VENV"
  override="${!var:-}"
  if [ -z "$override" ] && [ -n "${SAMPLES_VENV:-}" ] && "$SAMPLES_VENV/bin/python" -c "import $modules" 2>/dev/null; then
    override=$SAMPLES_VENV
  fi
  venv="${override:-$gen/.venv-$name}"
  ensure_venv "$venv" "$override" "$py" "$gen/requirements-$name.txt" "$modules" >&2
  cd "$repo"
  # Must be set before jax is imported: 8 CPU devices for the meshes.
  export XLA_FLAGS="--xla_force_host_platform_device_count=8"
  export JAX_PLATFORMS=cpu
  export PYTHONHASHSEED=0
  export TF_CPP_MIN_LOG_LEVEL=3
  export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
  export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
  run_repo_script "$venv" "samples/gen/$name.py" "$@"
}
