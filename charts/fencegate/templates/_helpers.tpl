{{/* Names. Cluster-scoped objects carry the full name, which includes the
release name, so two releases never share a ClusterRole or a webhook
configuration. */}}
{{- define "fencegate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fencegate.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "fencegate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fencegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "fencegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fencegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fencegate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fencegate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "fencegate.webhookServiceName" -}}
{{- printf "%s-webhook" (include "fencegate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Both webhook configurations share the full name (they are different
kinds). */}}
{{- define "fencegate.webhookConfigName" -}}
{{- include "fencegate.fullname" . }}
{{- end }}

{{- define "fencegate.leaderElectionID" -}}
{{- printf "%s-controller" (include "fencegate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* certMode: self-signed (the binary makes and rotates the certificates),
cert-manager, or external (a Secret and CA bundle the operator provides). */}}
{{- define "fencegate.certMode" -}}
{{- if .Values.certManager.enabled }}cert-manager
{{- else if .Values.webhook.tls.existingSecret }}external
{{- else }}self-signed
{{- end }}
{{- end }}

{{- define "fencegate.webhookSecretName" -}}
{{- if and (not .Values.certManager.enabled) .Values.webhook.tls.existingSecret }}
{{- .Values.webhook.tls.existingSecret }}
{{- else }}
{{- printf "%s-webhook-tls" (include "fencegate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "fencegate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* policyFiles renders the policies ConfigMap's data as YAML: the shipped
policies (policies/ links to the repository's policies, the files the binary
embeds; .helmignore leaves out their tests) overlaid by policies.files. */}}
{{- define "fencegate.policyFiles" -}}
{{- $files := dict }}
{{- if .Values.policies.builtin }}
{{- range $path, $content := .Files.Glob "policies/*.rego" }}
{{- $_ := set $files (base $path) (toString $content) }}
{{- end }}
{{- end }}
{{- range $name, $content := .Values.policies.files }}
{{- $_ := set $files $name $content }}
{{- end }}
{{- if $files }}
{{- toYaml $files }}
{{- end }}
{{- end }}

{{/* config renders data.fencegate.config. controller_users always holds
the chart's own service account, so its controller can write status on a
fenced cluster whatever the operator lists. */}}
{{- define "fencegate.config" -}}
{{- $self := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "fencegate.serviceAccountName" .) }}
{{- $config := dict
  "enforcement" .Values.config.enforcement
  "exempt_users" .Values.config.exemptUsers
  "exempt_groups" .Values.config.exemptGroups
  "exempt_namespaces" .Values.config.exemptNamespaces
  "controller_users" (prepend .Values.config.controllerUsers $self | uniq)
}}
{{- toYaml $config }}
{{- end }}

{{/* authoritySecret is the Secret of the TLS files to the authority: given,
or the one cert-manager writes the client certificate into. */}}
{{- define "fencegate.authoritySecret" -}}
{{- $tls := .Values.authority.tls }}
{{- if $tls.secretName }}{{ $tls.secretName }}{{ else if $tls.certManager.enabled }}{{ include "fencegate.fullname" . }}-authority-client{{ end }}
{{- end }}

{{/* authorityClientCert is "true" when fencegate presents a client
certificate to the authority (mTLS). */}}
{{- define "fencegate.authorityClientCert" -}}
{{- if or .Values.authority.tls.clientCertificate .Values.authority.tls.certManager.enabled }}true{{ end }}
{{- end }}

{{/* authorityIdentity is the identity cert-manager puts into the client
certificate, which the authority's authorization file binds to this
cluster. */}}
{{- define "fencegate.authorityIdentity" -}}
{{- $cm := .Values.authority.tls.certManager }}
{{- default (printf "spiffe://%s/fencegate/cluster/%s" $cm.trustDomain .Values.clusterName) $cm.identity }}
{{- end }}
