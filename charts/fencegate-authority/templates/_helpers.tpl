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
{{- $tls := or .Values.tls.secretName .Values.tls.certManager.enabled }}
{{- if and .Values.insecure $tls }}
{{- fail "insecure excludes tls.secretName and tls.certManager: choose TLS or, in a lab, plaintext (insecure: true)" }}
{{- end }}
{{- if not (or .Values.insecure $tls) }}
{{- fail "the authority needs tls.secretName (a Secret with tls.crt and tls.key; add ca.crt and tls.clientAuth for mTLS), tls.certManager.enabled, or, in a lab only, insecure: true" }}
{{- end }}
{{- if and .Values.tls.clientAuth (not $tls) }}
{{- fail "tls.clientAuth needs tls.secretName or tls.certManager.enabled: the Secret's ca.crt verifies client certificates" }}
{{- end }}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name: the cert-manager issuer (a CA issuer, so that ca.crt is in the Secret) that signs the authority's certificate" }}
{{- end }}
{{- if and .Values.tls.certManager.enabled (not (or .Values.tls.certManager.dnsNames .Values.tls.certManager.ipAddresses)) }}
{{- fail "tls.certManager.enabled needs tls.certManager.dnsNames or ipAddresses: the names the clusters reach the authority by" }}
{{- end }}
{{- $bound := or .Values.authorization.clusters .Values.authorization.operators .Values.authorization.readers }}
{{- if and $bound .Values.authorization.none }}
{{- fail "authorization.none and authorization entries exclude each other: list who may call, or let everyone with none: true" }}
{{- end }}
{{- if and $bound (not .Values.tls.clientAuth) }}
{{- fail "authorization needs tls.clientAuth: identities are read from the clients' certificates" }}
{{- end }}
{{- if not (or $bound .Values.authorization.none) }}
{{- if .Values.tls.clientAuth }}
{{- fail "tls.clientAuth needs authorization: bind each cluster's identity to its cluster (authorization.clusters) and list the operators, or set authorization.none: true to let every client the CA signed make every call" }}
{{- else }}
{{- fail "without tls.clientAuth the authority cannot tell its callers apart, so every caller may take the fence: set authorization.none: true to say so on purpose, or use tls.clientAuth with authorization" }}
{{- end }}
{{- end }}
{{- if and $embedded .Values.etcd.tls.secretName }}
{{- fail "etcd.tls.secretName is for an external etcd: set etcd.endpoints too" }}
{{- end }}
{{- include "authority.validateLease" . }}
{{- end }}

{{/* nanoseconds is a Go duration string of the values ("15s", "1500ms",
"1m30s", "2.5s") as a number of nanoseconds; it fails on anything else,
naming the value. Call it with (dict "name" "<value's path>" "value" <value>).
Helm has no duration parser: the schema's pattern admits the same units. */}}
{{- define "authority.nanoseconds" -}}
{{- $s := toString .value }}
{{- $units := dict "ns" 1 "us" 1e3 "µs" 1e3 "ms" 1e6 "s" 1e9 "m" 6e10 "h" 3.6e12 }}
{{- $parts := regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" $s -1 }}
{{- if or (not $parts) (ne (join "" $parts) $s) }}
{{- fail (printf "%s is %q, not a duration: write it like 15s, 1500ms or 1m30s" .name $s) }}
{{- end }}
{{- $total := 0.0 }}
{{- range $parts }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $unit := trimPrefix $number . }}
{{- $total = addf $total (mulf (float64 $number) (get $units $unit)) }}
{{- end }}
{{- round $total 0 }}
{{- end }}

{{/* validateLease fails the render on a lease TTL that the clusters'
declarations cannot keep alive: a holder renews its lease every declare
interval, and the TTL must span three of them (docs/design.md, "Agent
rules"). The declare interval is each cluster's, set in the fencegate
chart; clusterDeclareInterval says what the longest one is. */}}
{{- define "authority.validateLease" -}}
{{- range .Values.extraEnv }}
{{- if eq (toString .name) "FENCEGATE_LEASE_TTL" }}
{{- fail "extraEnv sets FENCEGATE_LEASE_TTL: set leaseTTL instead, which the chart checks against clusterDeclareInterval" }}
{{- end }}
{{- end }}
{{- $ttl := include "authority.nanoseconds" (dict "name" "leaseTTL" "value" .Values.leaseTTL) | float64 }}
{{- $interval := include "authority.nanoseconds" (dict "name" "clusterDeclareInterval" "value" .Values.clusterDeclareInterval) | float64 }}
{{- if lt $ttl (mulf 3 $interval) }}
{{- fail (printf "leaseTTL (%s) is below three clusterDeclareInterval (3 × %s): the clusters renew their leases every declare interval, and the lease TTL must span three of them so that a lost declaration never ends a holder's lease. Raise leaseTTL to at least three clusterDeclareInterval, or, if the clusters declare more often (their fencegate chart's authority.declareInterval), set clusterDeclareInterval to the longest of their intervals." .Values.leaseTTL .Values.clusterDeclareInterval) }}
{{- end }}
{{- end }}

{{/* tlsSecretName is the Secret of the serving certificate: given, or the
one cert-manager writes. */}}
{{- define "authority.tlsSecretName" -}}
{{- if .Values.tls.secretName }}{{ .Values.tls.secretName }}{{ else if .Values.tls.certManager.enabled }}{{ include "authority.fullname" . }}-tls{{ end }}
{{- end }}

{{/* authorized is "true" when an authorization file binds identities. */}}
{{- define "authority.authorized" -}}
{{- if or .Values.authorization.clusters .Values.authorization.operators .Values.authorization.readers }}true{{ end }}
{{- end }}
