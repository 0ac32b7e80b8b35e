#!/usr/bin/env bash
# Make sure jemalloc (Debian's libjemalloc2) can be loaded, for the tests that run a process
# on it as the image runs the daemon (tests/engine/test_heap_release.py; deploy/Dockerfile)
# and for daemon-rss's jemalloc row. When missing and we are root with apt-get, installs the
# Debian package `libjemalloc2`. When that is not possible it warns loudly and exits 0, and
# those tests skip ('needs jemalloc') -- except under CI=true, where it exits 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ensure-lib.sh"

found() {
  local lib
  lib="$(ldconfig -p 2>/dev/null | awk '/libjemalloc\.so\.2 /{print $NF; exit}')"
  [[ -n "$lib" ]] || return 1
  echo "jemalloc: $lib"
}

WHAT="jemalloc (libjemalloc.so.2)"
TESTS="the tests of the image's allocator"
SKIP="SKIPPED ('needs jemalloc')"
FIX="apt-get install libjemalloc2 (as root)."
ensure_packages libjemalloc2
