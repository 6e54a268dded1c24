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
