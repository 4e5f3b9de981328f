{{/* Chart name, shortened to a DNS label. */}}
{{- define "muster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the release name when it already contains the chart name, else "<release>-<chart>".
Object names add a suffix (-operator, -node-agent), so keep room for it.
*/}}
{{- define "muster.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "muster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "muster.labels" -}}
helm.sh/chart: {{ include "muster.chart" . }}
app.kubernetes.io/name: {{ include "muster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: muster
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component (operator, node-agent). */}}
{{- define "muster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "muster.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Full labels of one component. */}}
{{- define "muster.componentLabels" -}}
{{ include "muster.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "muster.operator.fullname" -}}
{{- printf "%s-operator" (include "muster.fullname" .) }}
{{- end }}

{{- define "muster.nodeAgent.fullname" -}}
{{- printf "%s-node-agent" (include "muster.fullname" .) }}
{{- end }}

{{- define "muster.operator.serviceAccountName" -}}
{{- default (include "muster.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- end }}

{{- define "muster.nodeAgent.serviceAccountName" -}}
{{- default (include "muster.nodeAgent.fullname" .) .Values.nodeAgent.serviceAccount.name }}
{{- end }}

{{- define "muster.operator.leaseName" -}}
{{- default (include "muster.operator.fullname" .) .Values.operator.leaderElection.leaseName }}
{{- end }}

{{/* The Kubernetes username of a service account: what admission requests carry. */}}
{{- define "muster.operator.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "muster.operator.serviceAccountName" .) }}
{{- end }}

{{- define "muster.nodeAgent.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "muster.nodeAgent.serviceAccountName" .) }}
{{- end }}

{{/* An image reference from {repository, tag, digest}; the digest wins, the tag defaults to appVersion. */}}
{{- define "muster.image" -}}
{{- $img := .image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) }}
{{- end }}
{{- end }}

{{- define "muster.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* The fixture file the node agent reads instead of NVML, if any. */}}
{{- define "muster.nodeAgent.fixture" -}}
{{- $f := .Values.nodeAgent.fixture }}
{{- if $f.content }}
{{- $f.content }}
{{- else if $f.name }}
{{- $path := printf "files/fixtures/%s.yaml" $f.name }}
{{- $content := .Files.Get $path }}
{{- if not $content }}
{{- fail (printf "nodeAgent.fixture.name: no bundled fixture %q (bundled: dgx-h100, pcie-4gpu-2socket, mixed-a100-l4); give your own YAML in nodeAgent.fixture.content" $f.name) }}
{{- end }}
{{- $content }}
{{- end }}
{{- end }}

{{/* The webhook Service, certificate Secret and webhook configurations' name. */}}
{{- define "muster.operator.webhookService" -}}
{{- printf "%s-webhook" (include "muster.operator.fullname" .) }}
{{- end }}

{{- define "muster.operator.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "muster.fullname" .) }}
{{- end }}
