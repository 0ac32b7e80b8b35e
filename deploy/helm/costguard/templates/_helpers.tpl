{{/* The release's full name: the release name when it already says costguard. */}}
{{- define "costguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Every object's labels but the selector's own: chart, version, manager. */}}
{{- define "costguard.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels of objects no selector picks (config, secret, accounts). */}}
{{- define "costguard.labels" -}}
{{ include "costguard.commonLabels" . }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* What selects the daemon's pods (stable across upgrades: no version in it). */}}
{{- define "costguard.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: daemon
{{- end -}}

{{- define "costguard.agentSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "costguard.serviceAccountName" -}}
{{- default (include "costguard.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "costguard.secretName" -}}
{{- default (printf "%s-secrets" (include "costguard.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* "true" when the store is a shared PostgreSQL (a URL given, or an existing Secret). */}}
{{- define "costguard.postgres" -}}
{{- if or .Values.secrets.existingSecret .Values.secrets.databaseUrl -}}true{{- end -}}
{{- end -}}

{{- define "costguard.image" -}}
{{- printf "%s:%s" .repository (default .appVersion .tag) -}}
{{- end -}}

{{- define "costguard.containerSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}
