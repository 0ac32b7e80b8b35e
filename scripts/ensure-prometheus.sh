#!/usr/bin/env bash
# Make sure Debian's Prometheus server and promtool exist for the Kubernetes tests
# (tests/k8s start a throwaway server through tests/prom.py). Looks where tests/prom.py
# looks: $COSTGUARD_PROMETHEUS / $COSTGUARD_PROMTOOL when set, else prometheus and promtool
# on PATH. When missing and we are root with apt-get, installs the Debian package
# `prometheus`. When that is not possible it warns loudly and exits 0, and the Kubernetes
# tests skip by name ('Prometheus unavailable') -- except under CI=true, where it exits 1.
set -euo pipefail

is_ci() { [[ "${CI:-}" =~ ^(1|true|TRUE|True|yes)$ ]]; }

found() {
  local server="${COSTGUARD_PROMETHEUS:-$(command -v prometheus 2>/dev/null || true)}"
  local tool="${COSTGUARD_PROMTOOL:-$(command -v promtool 2>/dev/null || true)}"
  [[ -n "$server" && -x "$server" && -n "$tool" && -x "$tool" ]] || return 1
  echo "Prometheus: $server, promtool: $tool"
}

give_up() {
  {
    echo
    echo "=================================================================="
    echo "  WARNING: Prometheus (server and promtool) not found"
    echo "  $1"
    if is_ci; then
      echo "  CI=true: the run FAILS rather than skip the Kubernetes tests."
    else
      echo "  The Kubernetes tests will be SKIPPED ('Prometheus unavailable')."
    fi
    echo "  Fix: apt-get install prometheus (as root), or set"
    echo "       COSTGUARD_PROMETHEUS and COSTGUARD_PROMTOOL to their paths."
    echo "=================================================================="
    echo
  } >&2
  is_ci && exit 1
  exit 0
}

found && exit 0
[[ "$(id -u)" == 0 ]] || give_up "Not root, so it cannot be installed automatically."
command -v apt-get >/dev/null 2>&1 || give_up "No apt-get on this machine to install it with."

echo "Prometheus missing: installing the Debian package 'prometheus'..."
export DEBIAN_FRONTEND=noninteractive
# the package's own service is not wanted: the tests start their own servers
if ! { apt-get update -q && apt-get install -y -q --no-install-recommends prometheus; }; then
  give_up "apt-get install prometheus failed (see above)."
fi
found && exit 0
give_up "apt-get installed prometheus but prometheus/promtool are still not found."
