#!/usr/bin/env bash
# Make sure Debian's headless Chromium and its ChromeDriver exist for the console's browser
# tests (tests/console/test_browser.py drives them through Selenium). Looks for them where
# those tests look: $COSTGUARD_CHROMIUM / $COSTGUARD_CHROMEDRIVER when set, else chromium and
# chromedriver on PATH. When missing and we are root with apt-get, installs the Debian
# packages `chromium` and `chromium-driver`. When that is not possible it warns loudly and
# exits 0, and the browser tests skip by name ('Chromium unavailable') -- except under
# CI=true, where it exits 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ensure-lib.sh"

found() {
  local browser="${COSTGUARD_CHROMIUM:-$(command -v chromium 2>/dev/null || true)}"
  local driver="${COSTGUARD_CHROMEDRIVER:-$(command -v chromedriver 2>/dev/null || true)}"
  [[ -n "$browser" && -x "$browser" && -n "$driver" && -x "$driver" ]] || return 1
  echo "Chromium: $browser, ChromeDriver: $driver"
}

WHAT="headless Chromium or ChromeDriver"
TESTS="the console's browser tests"
SKIP="SKIPPED ('Chromium unavailable')"
FIX="apt-get install chromium chromium-driver (as root), or set
       COSTGUARD_CHROMIUM and COSTGUARD_CHROMEDRIVER to their paths."
ensure_packages chromium chromium-driver
