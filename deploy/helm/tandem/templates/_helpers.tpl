{{/* Object names: <release>-<chart> unless overridden, cut to 63 characters. */}}
{{- define "tandem.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tandem.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "tandem.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tandem.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels that select every pod of this release. */}}
{{- define "tandem.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tandem.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tandem.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "tandem.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tandem.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* A worker role's object name: <fullname>-<pool>-<role>. Arg: dict root pool role. */}}
{{- define "tandem.workerName" -}}
{{- printf "%s-%s-%s" (include "tandem.fullname" .root) .pool .role | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The model file inside the pod. Arg: dict root pool. */}}
{{- define "tandem.modelPath" -}}
{{- if hasPrefix "/" .pool.model.path -}}
{{- .pool.model.path -}}
{{- else -}}
{{- printf "%s/%s" (trimSuffix "/" .root.Values.models.mountPath) .pool.model.path -}}
{{- end -}}
{{- end -}}

{{/* Pod security context (non-root, seccomp RuntimeDefault). */}}
{{- define "tandem.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container security context. Arg: dict ipcLock (bool). */}}
{{- define "tandem.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- if .ipcLock }}
  add: [IPC_LOCK]
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The models volume (PVC, a named source, or an emptyDir). */}}
{{- define "tandem.modelsVolume" -}}
- name: models
{{- if .Values.models.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.models.existingClaim }}
{{- else if .Values.models.volume }}
{{ toYaml .Values.models.volume | indent 2 }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{/* Init container: the model file must be readable before the server loads it. Arg: dict root path name. */}}
{{- define "tandem.modelCheck" -}}
{{- if .root.Values.models.check }}
- name: {{ .name }}
  image: {{ include "tandem.image" .root }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  command: ["/bin/sh", "-c"]
  args:
    - >-
      test -f "$TANDEM_MODEL" && test -r "$TANDEM_MODEL" ||
      { echo "tandem: model file $TANDEM_MODEL is missing or unreadable (volume 'models' mounted at $TANDEM_MODELS_MOUNT; check models.existingClaim / models.volume and the pool's model.path)" >&2; exit 1; }
  env:
    - name: TANDEM_MODEL
      value: {{ .path | quote }}
    - name: TANDEM_MODELS_MOUNT
      value: {{ .root.Values.models.mountPath | quote }}
  securityContext:
    {{- include "tandem.containerSecurityContext" (dict "ipcLock" false) | nindent 4 }}
  volumeMounts:
    - name: models
      mountPath: {{ .root.Values.models.mountPath }}
      readOnly: true
{{- end }}
{{- end -}}

{{/* Prometheus scrape annotations. Arg: dict root port. */}}
{{- define "tandem.scrapeAnnotations" -}}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* Topology spread constraints; one without a labelSelector gets `labels`. Arg: dict list labels. */}}
{{- define "tandem.topologySpread" -}}
{{- range .list }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $.labels) }}
{{- end }}
- {{ toYaml $c | nindent 2 | trim }}
{{- end }}
{{- end -}}

{{/* The role settings of one pool: workerDefaults, then the pool's role values;
replicas default to 1 for prefill and decode, 0 for colocated. Arg: dict root pool role. Returns YAML. */}}
{{- define "tandem.roleValues" -}}
{{- $r := mergeOverwrite (dict "replicas" (ternary 0 1 (eq .role "colocated"))) (deepCopy .root.Values.workerDefaults) (deepCopy (default dict (get .pool .role))) -}}
{{- toYaml $r -}}
{{- end -}}

{{/* Worker roles in deployment order. */}}
{{- define "tandem.roles" -}}
{{- list "prefill" "decode" "colocated" | toJson -}}
{{- end -}}
