# Sourced by scripts/ensure-*.sh: what they share. A script defines `found` (prints what it
# found and returns 0, or returns non-zero when the thing is missing) and sets, for the
# warning:
#   WHAT   what is missing ("jemalloc (libjemalloc.so.2)")
#   TESTS  the tests that need it ("the jemalloc tests")
#   SKIP   what they do without it, outside CI ("SKIPPED ('needs jemalloc')")
#   FIX    how to fix it by hand (lines)
# then calls `ensure_packages PACKAGE...`: found, else installed from Debian's packages when
# we are root with apt-get, else a loud warning and exit 0 (the tests skip) -- except under
# CI=true, where it exits 1.

is_ci() { [[ "${CI:-}" =~ ^(1|true|TRUE|True|yes)$ ]]; }

give_up() {
  {
    echo
    echo "=================================================================="
    echo "  WARNING: $WHAT not found"
    echo "  $1"
    if is_ci; then
      echo "  CI=true: the run FAILS rather than skip $TESTS."
    else
      echo "  ${TESTS^} will be $SKIP."
    fi
    echo "  Fix: $FIX"
    echo "=================================================================="
    echo
  } >&2
  is_ci && exit 1
  exit 0
}

ensure_packages() {
  found && exit 0
  [[ "$(id -u)" == 0 ]] || give_up "Not root, so it cannot be installed automatically."
  command -v apt-get >/dev/null 2>&1 || give_up "No apt-get on this machine to install it with."
  echo "$WHAT missing: installing the Debian package(s) $*..."
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "$@"; }; then
    give_up "apt-get install $* failed (see above)."
  fi
  found && exit 0
  give_up "apt-get installed $* but $WHAT is still not found."
}
