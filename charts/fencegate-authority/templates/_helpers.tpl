{{- define "authority.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "authority.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "authority.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "authority.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "authority.selectorLabels" -}}
app.kubernetes.io/name: {{ include "authority.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "authority.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "authority.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "authority.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* embedded is "true" when the authority runs its own etcd. */}}
{{- define "authority.embedded" -}}
{{- if not .Values.etcd.endpoints }}true{{ end }}
{{- end }}

{{/* validate fails the render on combinations that would not work, with
what to change. */}}
{{- define "authority.validate" -}}
{{- $embedded := include "authority.embedded" . }}
{{- if and $embedded (gt (int .Values.replicaCount) 1) }}
{{- fail (printf "replicaCount is %d, but the embedded etcd allows 1: each replica would keep its own fence and two clusters could hold it at once. Set etcd.endpoints to an external etcd cluster to run more replicas." (int .Values.replicaCount)) }}
{{- end }}
{{- if and .Values.insecure .Values.tls.secretName }}
{{- fail "insecure and tls.secretName exclude each other: choose TLS (tls.secretName) or, in a lab, plaintext (insecure: true)" }}
{{- end }}
{{- if not (or .Values.insecure .Values.tls.secretName) }}
{{- fail "the authority needs tls.secretName (a Secret with tls.crt and tls.key; add ca.crt and tls.clientAuth for mTLS) or, in a lab only, insecure: true" }}
{{- end }}
{{- if and .Values.tls.clientAuth (not .Values.tls.secretName) }}
{{- fail "tls.clientAuth needs tls.secretName: the Secret's ca.crt verifies client certificates" }}
{{- end }}
{{- if and $embedded .Values.etcd.tls.secretName }}
{{- fail "etcd.tls.secretName is for an external etcd: set etcd.endpoints too" }}
{{- end }}
{{- end }}
