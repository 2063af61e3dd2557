{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "gpu-sizer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: "<release>-gpu-sizer", or the release name when it already holds
the chart name. Kept to 52 characters so that suffixes like "-webhook-tls" stay under 63.
*/}}
{{- define "gpu-sizer.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-sizer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "gpu-sizer.labels" -}}
helm.sh/chart: {{ include "gpu-sizer.chart" . }}
{{ include "gpu-sizer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-sizer
{{- end }}

{{/* Labels that select the operator pods; never change them (Deployment selectors are immutable). */}}
{{- define "gpu-sizer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-sizer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "gpu-sizer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-sizer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Object names shared with the operator's flags (contract in the project's COMMON notes). */}}
{{- define "gpu-sizer.configName" -}}{{ include "gpu-sizer.fullname" . }}-config{{- end }}
{{- define "gpu-sizer.webhookServiceName" -}}{{ include "gpu-sizer.fullname" . }}-webhook{{- end }}
{{- define "gpu-sizer.webhookConfigName" -}}{{ include "gpu-sizer.fullname" . }}-webhook{{- end }}
{{- define "gpu-sizer.webhookSecretName" -}}{{ include "gpu-sizer.fullname" . }}-webhook-tls{{- end }}
{{- define "gpu-sizer.ledgerName" -}}{{ include "gpu-sizer.fullname" . }}-ledger{{- end }}
{{- define "gpu-sizer.metricsServiceName" -}}{{ include "gpu-sizer.fullname" . }}-metrics{{- end }}
{{- define "gpu-sizer.certificateName" -}}{{ include "gpu-sizer.fullname" . }}-webhook{{- end }}
{{- define "gpu-sizer.issuerName" -}}{{ include "gpu-sizer.fullname" . }}-selfsigned{{- end }}

{{/* "true" when kopf peering is on: more than one replica, or forced by peering.enabled. */}}
{{- define "gpu-sizer.peering" -}}
{{- if or .Values.peering.enabled (gt (int .Values.replicaCount) 1) }}true{{- end }}
{{- end }}

{{- define "gpu-sizer.peeringName" -}}
{{- default (include "gpu-sizer.fullname" .) .Values.peering.name }}
{{- end }}

{{/* "true" when the operator creates its own self-signed webhook certificate. */}}
{{- define "gpu-sizer.selfSignedWebhook" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.certManager.enabled) }}true{{- end }}
{{- end }}

{{- define "gpu-sizer.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "gpu-sizer.probeImage" -}}
{{- $p := .Values.measurement.probeImage }}
{{- printf "%s:%s" $p.repository (default .Chart.AppVersion $p.tag) }}
{{- end }}

{{/* The namespaces the webhooks never see: the operator's own and kube-system, plus extras. */}}
{{- define "gpu-sizer.webhookNamespaceSelector" -}}
{{- $sel := deepCopy (default dict .Values.webhook.namespaceSelector) }}
{{- $excluded := concat (list .Release.Namespace "kube-system") .Values.webhook.excludeNamespaces | uniq }}
{{- $exprs := concat (default list $sel.matchExpressions) (list (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $excluded)) }}
{{- $_ := set $sel "matchExpressions" $exprs }}
{{- toYaml $sel }}
{{- end }}

{{/* policy.yaml: defaultMinHeadroomFraction falls back to defaultHeadroom. */}}
{{- define "gpu-sizer.policy" -}}
{{- $policy := deepCopy .Values.policy }}
{{- if kindIs "invalid" $policy.defaultMinHeadroomFraction }}
{{- $_ := set $policy "defaultMinHeadroomFraction" .Values.defaultHeadroom }}
{{- end }}
{{- toYaml $policy }}
{{- end }}

{{- /*
A webhook's clientConfig: through the webhook Service, or at webhook.url (an operator the API
server reaches by address, e.g. one run outside the cluster). Called with (list $ "path").
*/}}
{{- define "gpu-sizer.webhookClientConfig" -}}
{{- $root := index . 0 }}
{{- $path := index . 1 }}
{{- if $root.Values.webhook.url }}
url: {{ printf "%s/%s" (trimSuffix "/" $root.Values.webhook.url) $path | quote }}
{{- else }}
service:
  name: {{ include "gpu-sizer.webhookServiceName" $root }}
  namespace: {{ $root.Release.Namespace }}
  path: /{{ $path }}
  port: 443
{{- end }}
{{- end }}

{{/* The host of webhook.url (an IP address or a DNS name), empty without one. */}}
{{- define "gpu-sizer.webhookUrlHost" -}}
{{- with .Values.webhook.url }}{{ (urlParse .).hostname }}{{- end }}
{{- end }}
