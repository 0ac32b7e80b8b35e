#!/usr/bin/env bash
# Create the IAM role the costguard daemon assumes on EKS (IRSA) and attach the policy that
# `costguard iam` generated (deploy/iam/aws/*.json). Review before running.
#
#   deploy/identity/aws/create-role.sh CLUSTER_NAME [readonly|enforce]
#
# Then put the printed role ARN in deploy/kubernetes/serviceaccount.yaml
# (eks.amazonaws.com/role-arn). Multi-account: deploy/iam/aws/costguard-hub.json lets this
# role assume CostguardRole in member accounts (each trusting this role).
set -euo pipefail
cluster="${1:?usage: $0 CLUSTER_NAME [readonly|enforce]}"
mode="${2:-readonly}"
here="$(cd "$(dirname "$0")" && pwd)"
policy_file="$here/../../iam/aws/costguard-$mode.json"
[[ -f "$policy_file" ]] || { echo "no $policy_file (mode is readonly or enforce)" >&2; exit 2; }

account="$(aws sts get-caller-identity --query Account --output text)"
issuer="$(aws eks describe-cluster --name "$cluster" --query cluster.identity.oidc.issuer \
  --output text)"
provider="${issuer#https://}"
trust="$(sed -e "s|ACCOUNT_ID|$account|g" -e "s|OIDC_PROVIDER|$provider|g" \
  "$here/irsa-trust-policy.json")"

aws iam create-role --role-name costguard --assume-role-policy-document "$trust" \
  --description "costguard daemon (EKS service account costguard/costguard)" >/dev/null
aws iam put-role-policy --role-name costguard --policy-name "costguard-$mode" \
  --policy-document "file://$policy_file"
echo "arn:aws:iam::$account:role/costguard"
