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
source "$(dirname "${BASH_SOURCE[0]}")/ensure-lib.sh"

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

found() {
  local bindir
  bindir="$(find_bindir)" || return 1
  echo "PostgreSQL server binaries: $bindir"
}

WHAT="PostgreSQL server binaries"
TESTS="the PostgreSQL tests"
SKIP="SKIPPED ('PostgreSQL unavailable: ...')"
FIX="apt-get install postgresql (as root), or set
       COSTGUARD_PG_BINDIR to a directory holding initdb/pg_ctl/postgres."
if [[ -n "${COSTGUARD_PG_BINDIR:-}" ]] && ! find_bindir >/dev/null; then
  give_up "COSTGUARD_PG_BINDIR=$COSTGUARD_PG_BINDIR has no initdb, pg_ctl and postgres."
fi
ensure_packages postgresql
