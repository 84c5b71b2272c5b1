{{- define "shunter.name" -}}{{ .Chart.Name }}{{- end -}}
{{- define "shunter.fullname" -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- define "shunter.labels" -}}
app.kubernetes.io/name: {{ include "shunter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "shunter.selector" -}}
app.kubernetes.io/name: {{ include "shunter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "shunter.secretName" -}}{{ .Values.secrets.existingSecret | default (printf "%s-tokens" (include "shunter.fullname" .)) }}{{- end -}}
{{- define "shunter.storageClaim" -}}{{ .Values.storage.existingClaim | default (printf "%s-storage" (include "shunter.fullname" .)) }}{{- end -}}
{{- define "shunter.rayHead" -}}{{ printf "%s-ray-head-svc" (include "shunter.fullname" .) }}{{- end -}}
{{/* Pod security shared by every container we run. */}}
{{- define "shunter.containerSecurity" -}}
allowPrivilegeEscalation: false
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{/* Where storage is: the bucket (and its credentials), or the mounted volume. */}}
{{- define "shunter.storageEnv" -}}
{{- if .Values.storage.uri }}
- name: SHUNTER_STORAGE
  value: {{ .Values.storage.uri | quote }}
- name: AWS_REGION
  value: {{ .Values.storage.s3.region | quote }}
{{- with .Values.storage.s3.endpoint }}
- name: SHUNTER_S3_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.storage.s3.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: AWS_ACCESS_KEY_ID}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: AWS_SECRET_ACCESS_KEY}
{{- end }}
{{- else }}
- name: SHUNTER_STORAGE
  value: /storage
{{- end }}
{{- with .Values.storage.dataBuckets }}
- name: SHUNTER_DATA_BUCKETS
  value: {{ . | quote }}
{{- end }}
{{- end -}}
{{/* A per-node cache directory: hostPath when given, else an emptyDir for the pod. */}}
{{- define "shunter.nodeDir" -}}
{{- if .hostPath }}
hostPath:
  path: {{ .hostPath }}
  type: DirectoryOrCreate
{{- else }}
emptyDir:
  sizeLimit: {{ .sizeLimit }}
{{- end }}
{{- end -}}
{{/* Ray's token auth: the same token on every node and in the API. */}}
{{- define "shunter.rayAuthEnv" -}}
- name: RAY_AUTH_MODE
  value: token
- name: RAY_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "shunter.secretName" . }}
      key: ray-auth-token
{{- end -}}
