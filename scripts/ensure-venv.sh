#!/usr/bin/env bash
# Create the project's virtualenv at $1 (default .venv) with $PYTHON (default python3) when it
# is missing or broken. On Debian, `python3 -m venv` needs the python3-venv package: as root
# with apt-get, install it; otherwise say how to. Installing the project into it is the
# Makefile's job (it re-installs only when pyproject.toml changes).
# $VENV_ARGS: extra arguments for `python -m venv` (--system-site-packages, --without-pip).
set -euo pipefail

venv="${1:-.venv}"
python="${PYTHON:-python3}"

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import sys' 2>/dev/null; then
  exit 0
fi

if ! command -v "$python" >/dev/null 2>&1; then
  echo "ERROR: $python not found; install Python 3.11 or newer (or run make PYTHON=/path/to/python3.11)." >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "ERROR: costguard needs Python >= 3.11, but $python is $("$python" -V 2>&1)." >&2
  echo "       Run make PYTHON=/path/to/python3.11." >&2
  exit 1
fi

rm -rf "$venv"
read -r -a venv_args <<< "${VENV_ARGS:-}"
if "$python" -m venv "${venv_args[@]}" "$venv" 2>/dev/null; then
  exit 0
fi
rm -rf "$venv"

# Debian splits venv/ensurepip out of the interpreter package.
pkg="python$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "'$python -m venv' failed: installing $pkg with apt-get..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q && apt-get install -y -q "$pkg"
  "$python" -m venv "${venv_args[@]}" "$venv"
  exit 0
fi
echo "ERROR: '$python -m venv $venv' failed. On Debian/Ubuntu: sudo apt-get install $pkg" >&2
exit 1
