#!/bin/bash
# costguard's agent on a Vertex AI Workbench instance: its post-startup script (metadata
# key `post-startup-script`, a gs:// URL; it runs as root after each start).
#
#   gcloud storage cp workbench-post-startup.sh gs://YOUR-BUCKET/costguard/
#   gcloud workbench instances create NAME --location=ZONE \
#     --metadata=post-startup-script=gs://YOUR-BUCKET/costguard/workbench-post-startup.sh,post-startup-script-behavior=run_every_start
#
# Edit the three settings below. A Workbench instance is a Compute Engine VM: the agent
# proves which one with the VM's identity token (docs/agent.md), reads its GPUs through
# NVML and its Jupyter kernels through the server on 8080, and pushes to the daemon with
# the token kept in Secret Manager (the instance's service account needs
# secretmanager.versions.access on it). docs/notebooks.md has the details.
set -euo pipefail

COSTGUARD_URL="${COSTGUARD_URL:-https://costguard.internal:8787}"
# where to install the agent from: a wheel (gs://... or a path), or a package index
COSTGUARD_WHEEL="${COSTGUARD_WHEEL:-gs://YOUR-BUCKET/costguard/costguard_gpu-latest-py3-none-any.whl}"
COSTGUARD_TOKEN_SECRET="${COSTGUARD_TOKEN_SECRET:-costguard-agent-token}"

PREFIX="${COSTGUARD_PREFIX:-/opt/costguard-agent}"
STATE="${COSTGUARD_STATE:-/var/lib/costguard-agent}"
PYTHON="${COSTGUARD_PYTHON:-python3}"

run_agent() {
  set -euo pipefail
  mkdir -p "$STATE" && chmod 700 "$STATE"
  if [[ ! -x "$PREFIX/bin/costguard-agent" ]]; then
    "$PYTHON" -m venv "$PREFIX"
    wheel="$COSTGUARD_WHEEL"
    if [[ "$wheel" == gs://* ]]; then
      gcloud storage cp "$wheel" "$STATE/" >/dev/null
      wheel="$STATE/$(basename "$wheel")"
    fi
    "$PREFIX/bin/pip" install --quiet "$wheel"
  fi
  umask 077
  gcloud secrets versions access latest --secret="$COSTGUARD_TOKEN_SECRET" >"$STATE/token"
  # no --provider/--instance-id: the agent asks the metadata server, and proves the VM
  exec "$PREFIX/bin/costguard-agent" --url "$COSTGUARD_URL" --token-file "$STATE/token" \
    --jupyter-url http://127.0.0.1:8080 --buffer "$STATE/buffer.sqlite3"
}

export -f run_agent
export COSTGUARD_URL COSTGUARD_WHEEL COSTGUARD_TOKEN_SECRET PREFIX STATE PYTHON
nohup bash -c run_agent >>"${COSTGUARD_LOG:-/var/log/costguard-agent.log}" 2>&1 &
echo "costguard-agent starting in the background (log: ${COSTGUARD_LOG:-/var/log/costguard-agent.log})"
