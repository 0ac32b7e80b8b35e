#!/usr/bin/env bash
# Make sure jemalloc (Debian's libjemalloc2) can be loaded, for the tests that run a process
# on it as the image runs the daemon (tests/engine/test_heap_release.py; deploy/Dockerfile)
# and for daemon-rss's jemalloc row. When missing and we are root with apt-get, installs the
# Debian package `libjemalloc2`. When that is not possible it warns loudly and exits 0, and
# those tests skip ('needs jemalloc') -- except under CI=true, where it exits 1.
set -euo pipefail

is_ci() { [[ "${CI:-}" =~ ^(1|true|TRUE|True|yes)$ ]]; }

found() {
  local lib
  lib="$(ldconfig -p 2>/dev/null | awk '/libjemalloc\.so\.2 /{print $NF; exit}')"
  [[ -n "$lib" ]] || return 1
  echo "jemalloc: $lib"
}

give_up() {
  {
    echo
    echo "=================================================================="
    echo "  WARNING: jemalloc (libjemalloc.so.2) not found"
    echo "  $1"
    if is_ci; then
      echo "  CI=true: the run FAILS rather than skip the jemalloc tests."
    else
      echo "  The tests of the image's allocator will be SKIPPED ('needs jemalloc')."
    fi
    echo "  Fix: apt-get install libjemalloc2 (as root)."
    echo "=================================================================="
    echo
  } >&2
  is_ci && exit 1
  exit 0
}

found && exit 0
[[ "$(id -u)" == 0 ]] || give_up "Not root, so it cannot be installed automatically."
command -v apt-get >/dev/null 2>&1 || give_up "No apt-get on this machine to install it with."

echo "jemalloc missing: installing the Debian package 'libjemalloc2'..."
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -q && apt-get install -y -q --no-install-recommends libjemalloc2; }; then
  give_up "apt-get install libjemalloc2 failed (see above)."
fi
found && exit 0
give_up "apt-get installed libjemalloc2 but libjemalloc.so.2 is still not found."
