#!/usr/bin/env bash
# Make sure PostgreSQL server binaries (initdb, pg_ctl, postgres) exist for the test suite,
# which starts its own throwaway server (tests/pg.py). Looks where tests/pg.py looks:
# $COSTGUARD_PG_BINDIR (only there, when set), initdb on PATH, /usr/lib/postgresql/*/bin,
# /usr/local/pgsql/bin. When they are missing and we are root with apt-get, installs the
# Debian `postgresql` package. When that is not possible it warns loudly and exits 0, and the
# PostgreSQL tests skip by name -- except under CI=true, where it exits 1.
#
# Prints the bin directory it found on the last line of stdout.
set -euo pipefail

complete() { [[ -x "$1/initdb" && -x "$1/pg_ctl" && -x "$1/postgres" ]]; }

find_bindir() {
  if [[ -n "${COSTGUARD_PG_BINDIR:-}" ]]; then
    complete "$COSTGUARD_PG_BINDIR" && { echo "$COSTGUARD_PG_BINDIR"; return 0; }
    return 1
  fi
  local initdb dir
  if initdb="$(command -v initdb 2>/dev/null)"; then
    dir="$(dirname "$(readlink -f "$initdb")")"
    complete "$dir" && { echo "$dir"; return 0; }
  fi
  # Newest version first.
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V -r) /usr/local/pgsql/bin; do
    complete "$dir" && { echo "$dir"; return 0; }
  done
  return 1
}

is_ci() { [[ "${CI:-}" =~ ^(1|true|TRUE|True|yes)$ ]]; }

give_up() {
  local why="$1"
  {
    echo
    echo "=================================================================="
    echo "  WARNING: PostgreSQL server binaries not found"
    echo "  $why"
    if is_ci; then
      echo "  CI=true: the run FAILS rather than skip the PostgreSQL tests."
    else
      echo "  The PostgreSQL tests will be SKIPPED ('PostgreSQL unavailable: ...')."
    fi
    echo "  Fix: apt-get install postgresql (as root), or set"
    echo "       COSTGUARD_PG_BINDIR to a directory holding initdb/pg_ctl/postgres."
    echo "=================================================================="
    echo
  } >&2
  is_ci && exit 1
  exit 0
}

if bindir="$(find_bindir)"; then
  echo "PostgreSQL server binaries: $bindir"
  exit 0
fi

if [[ -n "${COSTGUARD_PG_BINDIR:-}" ]]; then
  give_up "COSTGUARD_PG_BINDIR=$COSTGUARD_PG_BINDIR has no initdb, pg_ctl and postgres."
fi
if [[ "$(id -u)" != 0 ]]; then
  give_up "Not root, so they cannot be installed automatically."
fi
if ! command -v apt-get >/dev/null 2>&1; then
  give_up "No apt-get on this machine to install them with."
fi

echo "PostgreSQL server binaries missing: installing the Debian package 'postgresql'..."
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -q && apt-get install -y -q --no-install-recommends postgresql; }; then
  give_up "apt-get install postgresql failed (see above)."
fi
if bindir="$(find_bindir)"; then
  echo "PostgreSQL server binaries: $bindir"
  exit 0
fi
give_up "apt-get installed postgresql but initdb/pg_ctl/postgres are still not found."
