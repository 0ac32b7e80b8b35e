#!/usr/bin/env bash
# Make sure Debian's headless Chromium and its ChromeDriver exist for the console's browser
# tests (tests/console/test_browser.py drives them through Selenium). Looks for them where
# those tests look: $COSTGUARD_CHROMIUM / $COSTGUARD_CHROMEDRIVER when set, else chromium and
# chromedriver on PATH. When missing and we are root with apt-get, installs the Debian
# packages `chromium` and `chromium-driver`. When that is not possible it warns loudly and
# exits 0, and the browser tests skip by name ('Chromium unavailable') -- except under
# CI=true, where it exits 1.
set -euo pipefail

is_ci() { [[ "${CI:-}" =~ ^(1|true|TRUE|True|yes)$ ]]; }

found() {
  local browser="${COSTGUARD_CHROMIUM:-$(command -v chromium 2>/dev/null || true)}"
  local driver="${COSTGUARD_CHROMEDRIVER:-$(command -v chromedriver 2>/dev/null || true)}"
  [[ -n "$browser" && -x "$browser" && -n "$driver" && -x "$driver" ]] || return 1
  echo "Chromium: $browser, ChromeDriver: $driver"
}

give_up() {
  {
    echo
    echo "=================================================================="
    echo "  WARNING: headless Chromium or ChromeDriver not found"
    echo "  $1"
    if is_ci; then
      echo "  CI=true: the run FAILS rather than skip the browser tests."
    else
      echo "  The console's browser tests will be SKIPPED ('Chromium unavailable')."
    fi
    echo "  Fix: apt-get install chromium chromium-driver (as root), or set"
    echo "       COSTGUARD_CHROMIUM and COSTGUARD_CHROMEDRIVER to their paths."
    echo "=================================================================="
    echo
  } >&2
  is_ci && exit 1
  exit 0
}

found && exit 0
[[ "$(id -u)" == 0 ]] || give_up "Not root, so they cannot be installed automatically."
command -v apt-get >/dev/null 2>&1 || give_up "No apt-get on this machine to install them with."

echo "Chromium missing: installing the Debian packages 'chromium' and 'chromium-driver'..."
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -q && apt-get install -y -q --no-install-recommends chromium chromium-driver; }; then
  give_up "apt-get install chromium chromium-driver failed (see above)."
fi
found && exit 0
give_up "apt-get installed chromium but chromium/chromedriver are still not found."
