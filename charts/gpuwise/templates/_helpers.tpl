{{/* Names ------------------------------------------------------------------------------------ */}}
{{- define "gpuwise.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpuwise.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpuwise.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpuwise.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuwise
{{- end }}

{{- define "gpuwise.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "gpuwise.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpuwise.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpuwise.webhookName" -}}
{{- printf "%s-webhook" (include "gpuwise.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpuwise.peeringName" -}}
{{- default (include "gpuwise.fullname" .) .Values.operator.peeringName }}
{{- end }}

{{/* Images: repository[:tag][@digest]; the sidecar defaults to the operator's image. ------- */}}
{{- define "gpuwise.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "gpuwise.sidecarImage" -}}
{{- $s := .Values.sidecar.image }}
{{- if not $s.repository }}
{{- include "gpuwise.image" . }}
{{- else if $s.digest }}
{{- printf "%s@%s" $s.repository $s.digest }}
{{- else }}
{{- printf "%s:%s" $s.repository (default .Chart.AppVersion $s.tag) }}
{{- end }}
{{- end }}

{{/* Scope: cluster-wide unless every watched namespace is a plain name (kopf's globs need the
     namespace list, and the chart cannot create Roles in namespaces it cannot name). ------ */}}
{{- define "gpuwise.clusterwide" -}}
{{- $globs := false }}
{{- range .Values.operator.watchNamespaces }}
{{- if regexMatch "[*?\\[\\]!]" . }}{{ $globs = true }}{{ end }}
{{- end }}
{{- if or (not .Values.operator.watchNamespaces) $globs }}true{{ end }}
{{- end }}

{{/* kopf's own scope: clusterwide when no namespace is given (RBAC may be wider, see above). */}}
{{- define "gpuwise.kopfClusterwide" -}}
{{- if not .Values.operator.watchNamespaces }}true{{ end }}
{{- end }}

{{- define "gpuwise.peering" -}}
{{- if gt (int .Values.operator.replicas) 1 }}true{{ end }}
{{- end }}

{{/* Node-side actions idle a node's GPUs: whatever runs there, in any namespace. */}}
{{- define "gpuwise.drainsNodes" -}}
{{- if or .Values.actions.migRepartition .Values.actions.pack }}true{{ end }}
{{- end }}

{{- define "gpuwise.webhookCertDir" -}}/etc/gpuwise/webhook{{- end }}
{{- define "gpuwise.settingsPath" -}}/etc/gpuwise/settings.yaml{{- end }}

{{/* The operator's settings file: gpuwise.operator.config.OperatorSettings, in camelCase. ---- */}}
{{- define "gpuwise.settings" -}}
sidecar:
  image: {{ include "gpuwise.sidecarImage" . | quote }}
  imagePullPolicy: {{ .Values.sidecar.pullPolicy }}
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  startupTimeoutSeconds: {{ .Values.sidecar.startupTimeoutSeconds }}
namespaces:
  {{- if .Values.operator.watchNamespaces }}
  {{- toYaml .Values.operator.watchNamespaces | nindent 2 }}
  {{- else }} []
  {{- end }}
resyncSeconds: {{ .Values.operator.resyncSeconds }}
podSecurity: {{ .Values.podSecurity }}
{{- with .Values.efficiency.prometheusUrl }}
prometheusUrl: {{ . | quote }}
{{- end }}
evaluationSeconds: {{ .Values.efficiency.evaluationSeconds }}
statusRefreshSeconds: {{ .Values.efficiency.statusRefreshSeconds }}
actions:
  enabled: {{ .Values.actions.enforce }}
  # The actions this install's RBAC allows: AdjustConfig, Reschedule and Suspend restart or stop a
  # job, which enforce grants; the node-side ones need their own switch.
  kinds: [AdjustConfig, Reschedule, Suspend
    {{- if .Values.actions.migRepartition }}, MigRepartition{{ end }}
    {{- if .Values.actions.pack }}, Pack{{ end }}]
  dryRun: {{ .Values.actions.dryRun }}
  cooldown: {{ .Values.actions.cooldown | quote }}
  maxActionsPerJob: {{ .Values.actions.maxActionsPerJob }}
  minRuntime: {{ .Values.actions.minRuntime | quote }}
  budgets:
    {{- toYaml .Values.actions.budgets | nindent 4 }}
  verifyWindow: {{ .Values.actions.verifyWindow | quote }}
  worseTolerance: {{ .Values.actions.worseTolerance }}
  applyTimeout: {{ .Values.actions.applyTimeout | quote }}
  gpuClasses:
    {{- toYaml .Values.actions.gpuClasses | nindent 4 }}
  {{- with .Values.actions.nodes }}
  nodes:
    drainTimeout: {{ .drainTimeout | quote }}
    evictNamespaces:
      {{- toYaml .evictNamespaces | nindent 6 }}
    packingPolicy: {{ .packingPolicy | quote }}
    mig:
      configTimeout: {{ .mig.configTimeout | quote }}
      configMap:
        namespace: {{ .mig.configMap.namespace | quote }}
        name: {{ .mig.configMap.name | quote }}
    timeSlicing:
      {{- with .timeSlicing.config }}
      config: {{ . | quote }}
      {{- end }}
      replicas: {{ .timeSlicing.replicas }}
      resource: {{ .timeSlicing.resource | quote }}
      configTimeout: {{ .timeSlicing.configTimeout | quote }}
  {{- end }}
{{- end }}

{{/* Namespaced permissions: granted cluster-wide, or in each watched namespace. ----------- */}}
{{- define "gpuwise.namespacedRules" -}}
- apiGroups: [gpuwise.io]
  resources: [trainingjobs]
  verbs: [get, list, watch, patch]
- apiGroups: [gpuwise.io]
  resources: [trainingjobs/status]
  verbs: [patch]
# The Job and Service gpuwise creates are owned with blockOwnerDeletion: true, which the API
# server's OwnerReferencesPermissionEnforcement admission (e.g. on OpenShift) allows only with
# update on the owner's finalizers.
- apiGroups: [gpuwise.io]
  resources: [trainingjobs/finalizers]
  verbs: [update]
- apiGroups: [batch]
  resources: [jobs]
  {{- if .Values.actions.enforce }}
  # Enforce: a restart replaces the Job with one rendered from the new overrides.
  verbs: [create, get, list, watch, patch, delete]
  {{- else }}
  verbs: [create, get, list, watch, patch]
  {{- end }}
- apiGroups: [""]
  resources: [services]
  verbs: [create, get, list, watch]
- apiGroups: [""]
  resources: [pods]
  {{- if .Values.actions.enforce }}
  # Enforce: the checkpoint request is an annotation on the worker pods.
  verbs: [get, list, watch, patch]
  {{- else }}
  verbs: [get, list, watch]
  {{- end }}
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- with .Values.gangScheduling }}
{{- /* Gang scheduling: each job's PodGroup, made before its Job and kept across restarts. */}}
{{- if .volcano }}
- apiGroups: [scheduling.volcano.sh]
  resources: [podgroups]
  verbs: [create, get]
{{- end }}
{{- if .coscheduling }}
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [create, get]
{{- end }}
{{- if .kai }}
- apiGroups: [scheduling.run.ai]
  resources: [podgroups]
  verbs: [create, get]
{{- end }}
{{- end }}
{{- if and (include "gpuwise.peering" .) (not (include "gpuwise.kopfClusterwide" .)) }}
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
{{- end }}
{{- end }}
