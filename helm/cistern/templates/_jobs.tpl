{{/* One word for /bin/sh: single-quoted, embedded quotes escaped. */}}
{{- define "cistern.shq" -}}
'{{ replace "'" "'\\''" (toString .) }}'
{{- end }}

{{- define "cistern.jobRetry" -}}
# Bounded retries: the master may still be starting when the hook runs.
try() { n=0; until "$@"; do n=$((n+1)); if [ "$n" -ge {{ int .Values.jobs.retries }} ]; then echo "giving up: $1 $2" >&2; return 1; fi; sleep {{ int .Values.jobs.retryDelaySeconds }}; done; }
# A path already mounted (an upgrade, a retried Job) is left as it is: to
# change a mount, `cistern unmount` it first.
mount_once() {
	# as `cistern mounts` lists it: no trailing slash
	p=$1; while [ "${#p}" -gt 1 ] && [ "${p%/}" != "$p" ]; do p=${p%/}; done
	if cistern --api "$CISTERN_API" mounts | awk -v p="$p" 'NR > 1 && $1 == p { f = 1 } END { exit !f }'; then
		echo "$p: already mounted, left as is"
		return 0
	fi
	cistern --api "$CISTERN_API" mount "$@"
}
{{- end }}

{{- define "cistern.hookJob" }}
{{- $j := .ctx.Values.jobs }}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ include "cistern.fullname" .ctx }}-{{ .name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "cistern.labels" (dict "ctx" .ctx "component" .name) | nindent 4 }}
  annotations:
    helm.sh/hook: {{ .hooks }}
    helm.sh/hook-weight: {{ .weight | quote }}
    helm.sh/hook-delete-policy: before-hook-creation
spec:
  backoffLimit: {{ int64 $j.backoffLimit }}
  activeDeadlineSeconds: {{ int64 $j.activeDeadlineSeconds }}
  ttlSecondsAfterFinished: {{ int64 $j.ttlSecondsAfterFinished }}
  template:
    metadata:
      labels:
        {{- include "cistern.labels" (dict "ctx" .ctx "component" .name) | nindent 8 }}
        {{- with .ctx.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .ctx.Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      restartPolicy: Never
      {{- with .ctx.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $j.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with include "cistern.scheduling" $j | trim }}
      {{- . | nindent 6 }}
      {{- end }}
      containers:
        - name: {{ .name }}
          image: {{ include "cistern.image" .ctx }}
          imagePullPolicy: {{ .ctx.Values.image.pullPolicy }}
          command:
            - /bin/sh
            - -c
            - {{ .script | quote }}
          env:
            - name: CISTERN_API
              value: {{ include "cistern.masterApi" .ctx | quote }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          resources:
            {{- toYaml $j.resources | nindent 12 }}
          {{- with $j.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
{{- end }}
