#!/bin/bash
# costguard's agent on a SageMaker notebook instance: the lifecycle configuration's OnStart
# script (it runs as root at every start). It installs the agent beside the notebook's own
# Python, then runs it in the background, so the start is not held up (SageMaker gives an
# OnStart script five minutes).
#
#   aws sagemaker create-notebook-instance-lifecycle-config \
#     --notebook-instance-lifecycle-config-name costguard-agent \
#     --on-start Content=$(base64 -w0 sagemaker-on-start.sh)
#
# and name it as the notebook's lifecycle configuration. Edit the three settings below (or
# set them in the notebook's environment). The agent reports for the notebook by its ARN
# (from /opt/ml/metadata/resource-metadata.json, which SageMaker writes), reads its GPUs
# through NVML and its Jupyter kernels through the server on 8443, and pushes to the daemon
# with the token kept in Secrets Manager (the notebook's execution role needs
# secretsmanager:GetSecretValue on it). docs/notebooks.md has the details, the identity
# mode the daemon needs for these agents included.
set -euo pipefail

COSTGUARD_URL="${COSTGUARD_URL:-https://costguard.internal:8787}"
# where to install the agent from: a wheel (s3://... or a path), or a package index
COSTGUARD_WHEEL="${COSTGUARD_WHEEL:-s3://YOUR-BUCKET/costguard/costguard_gpu-latest-py3-none-any.whl}"
COSTGUARD_TOKEN_SECRET="${COSTGUARD_TOKEN_SECRET:-costguard/agent-token}"

METADATA="${COSTGUARD_METADATA:-/opt/ml/metadata/resource-metadata.json}"
PREFIX="${COSTGUARD_PREFIX:-/opt/costguard-agent}"
STATE="${COSTGUARD_STATE:-/var/lib/costguard-agent}"
PYTHON="${COSTGUARD_PYTHON:-python3}"

arn="$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["ResourceArn"])' "$METADATA")"
region="$(cut -d: -f4 <<<"$arn")"

run_agent() {
  set -euo pipefail
  mkdir -p "$STATE" && chmod 700 "$STATE"
  if [[ ! -x "$PREFIX/bin/costguard-agent" ]]; then
    "$PYTHON" -m venv "$PREFIX"
    wheel="$COSTGUARD_WHEEL"
    if [[ "$wheel" == s3://* ]]; then
      aws s3 cp --region "$region" "$wheel" "$STATE/" >/dev/null
      wheel="$STATE/$(basename "$wheel")"
    fi
    "$PREFIX/bin/pip" install --quiet "$wheel"
  fi
  # the token goes to a file only root reads, never onto a command line
  umask 077
  aws secretsmanager get-secret-value --region "$region" --secret-id "$COSTGUARD_TOKEN_SECRET" \
    --query SecretString --output text >"$STATE/token"
  exec "$PREFIX/bin/costguard-agent" --url "$COSTGUARD_URL" --token-file "$STATE/token" \
    --provider aws --instance-id "$arn" --jupyter-url https://127.0.0.1:8443 \
    --buffer "$STATE/buffer.sqlite3"
}

export -f run_agent
export arn region COSTGUARD_URL COSTGUARD_WHEEL COSTGUARD_TOKEN_SECRET PREFIX STATE PYTHON
nohup bash -c run_agent >>"${COSTGUARD_LOG:-/var/log/costguard-agent.log}" 2>&1 &
echo "costguard-agent starting in the background for $arn (log: ${COSTGUARD_LOG:-/var/log/costguard-agent.log})"
