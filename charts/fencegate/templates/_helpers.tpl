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
fenced cluster whatever the operator lists. fenced_kinds are the group and
kind of each entry of admission.kinds (the policies match a request by
them; the resource is the webhooks'), left out when there are none. */}}
{{- define "fencegate.config" -}}
{{- $self := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "fencegate.serviceAccountName" .) }}
{{- $config := dict
  "enforcement" .Values.config.enforcement
  "exempt_users" .Values.config.exemptUsers
  "exempt_groups" .Values.config.exemptGroups
  "exempt_namespaces" .Values.config.exemptNamespaces
  "controller_users" (prepend .Values.config.controllerUsers $self | uniq)
}}
{{- with .Values.admission.kinds }}
{{- $kinds := list }}
{{- range . }}
{{- $kinds = append $kinds (dict "group" (.group | default "") "kind" .kind) }}
{{- end }}
{{- $_ := set $config "fenced_kinds" $kinds }}
{{- end }}
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

{{/* nanoseconds is a Go duration string of the values ("5s", "1500ms",
"1m30s", "2.5s") as a number of nanoseconds; it fails on anything else,
naming the value. Call it with (dict "name" "<value's path>" "value" <value>).
Helm has no duration parser: the schema's pattern admits the same units. */}}
{{- define "fencegate.nanoseconds" -}}
{{- $s := toString .value }}
{{- $units := dict "ns" 1 "us" 1e3 "µs" 1e3 "ms" 1e6 "s" 1e9 "m" 6e10 "h" 3.6e12 }}
{{- $parts := regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" $s -1 }}
{{- if or (not $parts) (ne (join "" $parts) $s) }}
{{- fail (printf "%s is %q, not a duration: write it like 5s, 1500ms or 1m30s" .name $s) }}
{{- end }}
{{- $total := 0.0 }}
{{- range $parts }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $unit := trimPrefix $number . }}
{{- $total = addf $total (mulf (float64 $number) (get $units $unit)) }}
{{- end }}
{{- round $total 0 }}
{{- end }}

{{/* validateTiming fails the render on timings that break the lease
margin (docs/design.md, "Agent rules"). A cluster is active until send
time + lease TTL − lease margin, and the authority may hand the fence to
another cluster at send time + lease TTL: the margin is what an admission
decided at the last moment of the active state has left to reach the API
server, which waits up to webhook.timeoutSeconds for it. The lease TTL is
the fence authority's, set in its own chart: authority.leaseTTL says what
it is, for these checks only (fencegate uses the TTL each answer carries). */}}
{{- define "fencegate.validateTiming" -}}
{{- $auth := .Values.authority }}
{{- range .Values.extraEnv }}
{{- $setting := get (dict "FENCEGATE_LEASE_MARGIN" "authority.leaseMargin" "FENCEGATE_DECLARE_INTERVAL" "authority.declareInterval") (toString .name) }}
{{- if $setting }}
{{- fail (printf "extraEnv sets %s: set %s instead, which the chart checks against webhook.timeoutSeconds and authority.leaseTTL" .name $setting) }}
{{- end }}
{{- end }}
{{- $timeout := float64 .Values.webhook.timeoutSeconds }}
{{- $margin := include "fencegate.nanoseconds" (dict "name" "authority.leaseMargin" "value" $auth.leaseMargin) | float64 }}
{{- $interval := include "fencegate.nanoseconds" (dict "name" "authority.declareInterval" "value" $auth.declareInterval) | float64 }}
{{- $ttl := include "fencegate.nanoseconds" (dict "name" "authority.leaseTTL" "value" $auth.leaseTTL) | float64 }}
{{- if ge (mulf $timeout 1e9) $margin }}
{{- fail (printf "webhook.timeoutSeconds (%v) must be below authority.leaseMargin (%s): this cluster stops acting as holder a lease margin before the authority may hand the fence to another cluster, and the API server accepts a webhook's answer up to timeoutSeconds after its call, so a change admitted just before this cluster's active state ends could be written after the fence moved. Lower webhook.timeoutSeconds below %s, or raise authority.leaseMargin above %vs (and keep it below authority.leaseTTL, %s)." .Values.webhook.timeoutSeconds $auth.leaseMargin $auth.leaseMargin .Values.webhook.timeoutSeconds $auth.leaseTTL) }}
{{- end }}
{{- if ge $margin $ttl }}
{{- fail (printf "authority.leaseMargin (%s) must be below authority.leaseTTL (%s), the fence authority's lease TTL: this cluster stops acting as holder a lease margin before its lease ends, so it could never hold the fence. Lower authority.leaseMargin (above webhook.timeoutSeconds, %vs), or, if the authority's leaseTTL (in its fencegate-authority chart) is longer, set authority.leaseTTL to it." $auth.leaseMargin $auth.leaseTTL .Values.webhook.timeoutSeconds) }}
{{- end }}
{{- if lt $ttl (mulf 3 $interval) }}
{{- fail (printf "authority.leaseTTL (%s) is below three authority.declareInterval (3 × %s): a holder renews its lease every declare interval, and the lease TTL must span three of them so that a lost declaration never ends the lease. Set authority.declareInterval to a third of the lease TTL or less, or, if the authority's leaseTTL (in its fencegate-authority chart) is longer, set authority.leaseTTL to it." $auth.leaseTTL $auth.declareInterval) }}
{{- end }}
{{- end }}

{{- /*
fencegate.domains: the fence domains the release serves, domain first,
as a YAML flow list; a domain given twice is served once.
*/}}
{{- define "fencegate.domains" -}}
[{{ prepend (.Values.domains | default list) .Values.domain | uniq | join ", " }}]
{{- end }}

{{- /*
fencegate.validateHold fails the render on hold settings fencegate run would
refuse, or that would bypass the chart's RBAC: the hold controller gets its
rights on exactly hold.kinds, so extraEnv must not name kinds of its own.
*/}}
{{- define "fencegate.validateHold" -}}
{{- range .Values.extraEnv }}
{{- if has (toString .name) (list "FENCEGATE_HOLD_KINDS" "FENCEGATE_HOLD_QUIET_FOR") }}
{{- fail (printf "extraEnv sets %s: set hold.kinds and hold.quietFor instead; the chart grants fencegate get, list, watch and patch on exactly the kinds of hold.kinds" .name) }}
{{- end }}
{{- end }}
{{- if .Values.hold.kinds }}
{{- $quiet := include "fencegate.nanoseconds" (dict "name" "hold.quietFor" "value" .Values.hold.quietFor) | float64 }}
{{- if le $quiet 0.0 }}
{{- fail (printf "hold.quietFor (%s) must be above zero: it is how long a held object must stay quiet before it counts as quiet (fencegate run --hold-quiet-for)" (toString .Values.hold.quietFor)) }}
{{- end }}
{{- end }}
{{- end }}
