#!/usr/bin/env bash
# Make sure Debian's Prometheus server and promtool exist for the Kubernetes tests
# (tests/k8s start a throwaway server through tests/prom.py). Looks where tests/prom.py
# looks: $COSTGUARD_PROMETHEUS / $COSTGUARD_PROMTOOL when set, else prometheus and promtool
# on PATH. When missing and we are root with apt-get, installs the Debian package
# `prometheus`. When that is not possible it warns loudly and exits 0, and the Kubernetes
# tests skip by name ('Prometheus unavailable') -- except under CI=true, where it exits 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ensure-lib.sh"

found() {
  local server="${COSTGUARD_PROMETHEUS:-$(command -v prometheus 2>/dev/null || true)}"
  local tool="${COSTGUARD_PROMTOOL:-$(command -v promtool 2>/dev/null || true)}"
  [[ -n "$server" && -x "$server" && -n "$tool" && -x "$tool" ]] || return 1
  echo "Prometheus: $server, promtool: $tool"
}

WHAT="Prometheus (server and promtool)"
TESTS="the Kubernetes tests"
SKIP="SKIPPED ('Prometheus unavailable')"
FIX="apt-get install prometheus (as root), or set
       COSTGUARD_PROMETHEUS and COSTGUARD_PROMTOOL to their paths."
# the package's own service is not wanted: the tests start their own servers
ensure_packages prometheus
