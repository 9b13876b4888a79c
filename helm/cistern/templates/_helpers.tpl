{{/*
Naming and labelling conventions of the chart (checked by
tests/integration/test_helm.sh):
  - every object is named "<fullname>-<component>";
  - every object carries the labels of cistern.labels, pods also;
  - selectors use only cistern.selectorLabels (name, instance, component).
*/}}

{{- define "cistern.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped prefix; kept short so "<fullname>-<component>" fits 63. */}}
{{- define "cistern.fullname" -}}
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

{{- define "cistern.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. Call with (dict "ctx" $ "component" "master"). */}}
{{- define "cistern.labels" -}}
helm.sh/chart: {{ include "cistern.chart" .ctx }}
{{ include "cistern.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: cistern
{{- end }}

{{- define "cistern.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cistern.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "cistern.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/* A value as the daemons read it: YAML numbers reach templates as
floats, which print in exponent form (6.8719476736e+10) that no Cistern
parser takes; whole ones print as integers. */}}
{{- define "cistern.str" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) }}{{ int64 . }}{{ else }}{{ toString . }}{{ end }}
{{- end }}

{{/* The master's Service name and the addresses clients use. */}}
{{- define "cistern.masterService" -}}
{{- printf "%s-master" (include "cistern.fullname" .) }}
{{- end }}

{{- define "cistern.masterHost" -}}
{{- printf "%s.%s.svc" (include "cistern.masterService" .) .Release.Namespace }}
{{- end }}

{{- define "cistern.masterRpc" -}}
{{- printf "%s:%d" (include "cistern.masterHost" .) (int .Values.master.rpcPort) }}
{{- end }}

{{- define "cistern.masterApi" -}}
{{- printf "%s:%d" (include "cistern.masterHost" .) (int .Values.master.httpPort) }}
{{- end }}

{{/* Fail the render for a port outside 1-65535: 0, which a daemon takes as
"any free port" or "none", cannot be a container port, a Service's port or
a probe's. Call with a dict of value name -> port. */}}
{{- define "cistern.checkPorts" -}}
{{- range $k, $v := . }}
{{- $p := int64 $v }}
{{- if or (lt $p 1) (gt $p 65535) }}
{{- fail (printf "%s: %v; want a port from 1 to 65535 (a container port, the Service's and the probes')" $k $v) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod annotations: Prometheus scrape hints and the user's. Call with
(dict "ctx" $ "port" 19601 "extra" dict). */}}
{{- define "cistern.podAnnotations" -}}
{{- if .ctx.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .ctx.Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Startup, liveness and readiness probes on /healthz and /readyz of the
named port. The startup probe holds the liveness probe off while a daemon
starts (a worker checks every block of its index first: minutes on a big
cold cache; up to an hour by default). Call with (dict "c" .Values.master). */}}
{{- define "cistern.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: {{ int64 (dig "startupProbe" "periodSeconds" 10 .c) }}
  timeoutSeconds: {{ int64 (dig "startupProbe" "timeoutSeconds" 3 .c) }}
  failureThreshold: {{ int64 (dig "startupProbe" "failureThreshold" 360 .c) }}
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  initialDelaySeconds: {{ int64 .c.livenessProbe.initialDelaySeconds }}
  periodSeconds: {{ int64 .c.livenessProbe.periodSeconds }}
  timeoutSeconds: {{ int64 .c.livenessProbe.timeoutSeconds }}
  failureThreshold: {{ int64 .c.livenessProbe.failureThreshold }}
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  initialDelaySeconds: {{ int64 .c.readinessProbe.initialDelaySeconds }}
  periodSeconds: {{ int64 .c.readinessProbe.periodSeconds }}
  timeoutSeconds: {{ int64 .c.readinessProbe.timeoutSeconds }}
  failureThreshold: {{ int64 .c.readinessProbe.failureThreshold }}
{{- end }}

{{/* Scheduling fields of a pod spec. Call with the component's values. */}}
{{- define "cistern.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Mount options that are credentials: these come only from Secrets. */}}
{{- define "cistern.secretOptionNames" -}}
access_key secret_key session_token access-key secret-key session-token password token
{{- end }}
