#!/usr/bin/env bash
# Give the costguard daemon on GKE a Google identity without keys (Workload Identity):
# a Google service account holding the custom role from deploy/iam/gcp, which the Kubernetes
# service account costguard/costguard may impersonate. Review before running.
#
#   deploy/identity/gcp/workload-identity.sh PROJECT_ID [costguard-role|costguard-readonly-role]
#
# The GSA name matches deploy/kubernetes/serviceaccount.yaml (iam.gke.io/gcp-service-account).
# Several projects: grant the same role on each project the daemon governs (last command).
set -euo pipefail
project="${1:?usage: $0 PROJECT_ID [costguard-role|costguard-readonly-role]}"
role_file="${2:-costguard-readonly-role}"
here="$(cd "$(dirname "$0")" && pwd)"
role_yaml="$here/../../iam/gcp/$role_file.yaml"
[[ -f "$role_yaml" ]] || { echo "no $role_yaml" >&2; exit 2; }
role_id="${role_file//-/_}"
gsa="costguard@$project.iam.gserviceaccount.com"

gcloud iam roles create "$role_id" --project "$project" --file "$role_yaml" \
  || gcloud iam roles update "$role_id" --project "$project" --file "$role_yaml"
gcloud iam service-accounts create costguard --project "$project" \
  --display-name "costguard daemon"
# the Kubernetes service account costguard/costguard may act as the Google one ...
gcloud iam service-accounts add-iam-policy-binding "$gsa" --project "$project" \
  --role roles/iam.workloadIdentityUser \
  --member "serviceAccount:$project.svc.id.goog[costguard/costguard]"
# ... which holds the custom role on the governed project
gcloud projects add-iam-policy-binding "$project" \
  --role "projects/$project/roles/$role_id" --member "serviceAccount:$gsa"
