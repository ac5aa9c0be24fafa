package charts

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Names the fencegate chart gives its objects for release "fg".
const (
	fullname      = "fg-fencegate"
	webhookSvc    = "fg-fencegate-webhook"
	webhookSecret = "fg-fencegate-webhook-tls"
	leaderID      = "fg-fencegate-controller"
	selfUser      = "system:serviceaccount:" + namespace + ":" + fullname
)

// fencegateRender is the fencegate chart rendered for one values file, with
// its main objects decoded.
type fencegateRender struct {
	rendered
	deploy      appsv1.Deployment
	container   corev1.Container
	vwc         admissionregistrationv1.ValidatingWebhookConfiguration
	mwc         admissionregistrationv1.MutatingWebhookConfiguration
	clusterRole rbacv1.ClusterRole
	config      map[string]any
}

func renderFencegate(t *testing.T, h *helmTool, valuesFiles []string, extra ...string) fencegateRender {
	t.Helper()
	r := fencegateRender{rendered: h.render(t, fencegateChart, valuesFiles, extra...)}
	r.get(t, "Deployment", fullname, &r.deploy)
	r.container = r.deploy.Spec.Template.Spec.Containers[0]
	r.get(t, "ValidatingWebhookConfiguration", fullname, &r.vwc)
	r.get(t, "MutatingWebhookConfiguration", fullname, &r.mwc)
	r.get(t, "ClusterRole", fullname, &r.clusterRole)
	var cm corev1.ConfigMap
	r.get(t, "ConfigMap", fullname+"-config", &cm)
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &r.config); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	return r
}

// env returns the value of an environment variable of the container, or
// "<unset>".
func env(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			if e.ValueFrom != nil {
				return "<from " + e.ValueFrom.String() + ">"
			}
			return e.Value
		}
	}
	return "<unset>"
}

func volume(spec corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// rulesFor returns the RBAC rules that grant on a resource.
func rulesFor(rules []rbacv1.PolicyRule, resource string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		if slices.Contains(r.Resources, resource) {
			out = append(out, r)
		}
	}
	return out
}

func wantEnv(t *testing.T, c corev1.Container, want map[string]string) {
	t.Helper()
	for name, value := range want {
		if got := env(c, name); got != value {
			t.Errorf("env %s = %q, want %q", name, got, value)
		}
	}
}

// shippedPolicies reads the repository's policies, as the binary embeds
// them: every .rego file but the tests.
func shippedPolicies(t *testing.T, h *helmTool) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(h.root, "policies", "*.rego"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.rego") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = string(b)
	}
	if len(out) == 0 {
		t.Fatal("no shipped policies in policies/")
	}
	return out
}

func TestFencegateChart(t *testing.T) {
	h := newHelm(t)
	ci := func(name string) []string { return []string{filepath.Join(h.chartDir(fencegateChart), "ci", name)} }

	tests := map[string]struct {
		values []string
		check  func(t *testing.T, r fencegateRender)
	}{
		"defaults: self-signed certificates, shipped policies, deny": {
			values: ci("defaults-values.yaml"),
			check: func(t *testing.T, r fencegateRender) {
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_CLUSTER_NAME":                     "east",
					"FENCEGATE_EPOCH":                            "7",
					"FENCEGATE_AUTHORITY":                        "fence.example.com:7443",
					"FENCEGATE_AUTHORITY_INSECURE":               "<unset>",
					"FENCEGATE_AUTHORITY_CA":                     "<unset>",
					"FENCEGATE_CLUSTER_UID":                      "<unset>",
					"FENCEGATE_WEBHOOK_CERTS":                    "self-signed",
					"FENCEGATE_WEBHOOK_SECRET_NAME":              webhookSecret,
					"FENCEGATE_WEBHOOK_SERVICE_NAME":             webhookSvc,
					"FENCEGATE_VALIDATING_WEBHOOK_CONFIGURATION": fullname,
					"FENCEGATE_MUTATING_WEBHOOK_CONFIGURATION":   fullname,
					"FENCEGATE_POLICY_DIR":                       "/etc/fencegate/policies",
					"FENCEGATE_CONFIG_FILE":                      "/etc/fencegate/config/config.yaml",
					"FENCEGATE_LEADER_ELECT":                     "true",
					"FENCEGATE_LEADER_ELECTION_ID":               leaderID,
				})
				if got := env(r.container, "FENCEGATE_NAMESPACE"); !strings.Contains(got, "metadata.namespace") {
					t.Errorf("FENCEGATE_NAMESPACE = %s, want the downward API's metadata.namespace", got)
				}
				if got := env(r.container, "FENCEGATE_INSTANCE"); !strings.Contains(got, "metadata.name") {
					t.Errorf("FENCEGATE_INSTANCE = %s, want the pod name from the downward API: each pod holds its own lease", got)
				}
				if *r.deploy.Spec.Replicas != 2 {
					t.Errorf("replicas = %d, want 2", *r.deploy.Spec.Replicas)
				}
				if v := volume(r.deploy.Spec.Template.Spec, "webhook-certs"); v == nil || v.EmptyDir == nil {
					t.Error("self-signed certificates need a writable emptyDir for the certificate directory")
				}
				var secret corev1.Secret
				r.get(t, "Secret", webhookSecret, &secret)
				if len(secret.Data) != 0 || len(secret.StringData) != 0 {
					t.Error("the webhook Secret must be rendered empty, or helm upgrade would overwrite the certificates fencegate wrote")
				}
				for _, w := range r.vwc.Webhooks {
					if len(w.ClientConfig.CABundle) != 0 {
						t.Error("a rendered caBundle would be reset by every helm upgrade; fencegate injects it")
					}
				}
				if !slices.ContainsFunc(rulesFor(r.clusterRole.Rules, "namespaces"), readsKubeSystem) {
					t.Error("reading the kube-system UID needs a namespaces rule")
				}
				var pdb policyv1.PodDisruptionBudget
				r.get(t, "PodDisruptionBudget", fullname, &pdb)
				if pdb.Spec.MinAvailable.IntValue() != 1 {
					t.Errorf("PodDisruptionBudget minAvailable = %v, want 1", pdb.Spec.MinAvailable)
				}
				if r.config["enforcement"] != "deny" {
					t.Errorf("enforcement = %v, want deny", r.config["enforcement"])
				}
				// The policies ConfigMap is the repository's shipped
				// policies, byte for byte.
				var policies corev1.ConfigMap
				r.get(t, "ConfigMap", fullname+"-policies", &policies)
				if want := shippedPolicies(t, h); !reflect.DeepEqual(policies.Data, want) {
					t.Errorf("policies ConfigMap holds %v, want the shipped policies %v", keys(policies.Data), keys(want))
				}
				if r.deploy.Spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution == nil {
					t.Error("no preferred pod anti-affinity by default")
				}
			},
		},
		"cert-manager issues the certificate and injects the CA": {
			values: ci("cert-manager-values.yaml"),
			check: func(t *testing.T, r fencegateRender) {
				want := namespace + "/" + fullname + "-webhook"
				for kind, annotations := range map[string]map[string]string{
					"validating": r.vwc.Annotations, "mutating": r.mwc.Annotations,
				} {
					if got := annotations["cert-manager.io/inject-ca-from"]; got != want {
						t.Errorf("%s webhook configuration: inject-ca-from = %q, want %q", kind, got, want)
					}
				}
				if n := r.count("Certificate"); n != 2 {
					t.Errorf("%d Certificates, want the CA and the serving certificate", n)
				}
				if n := r.count("Issuer"); n != 2 {
					t.Errorf("%d Issuers, want the self-signed root and the CA issuer", n)
				}
				if r.has("Secret", webhookSecret) {
					t.Error("the chart must not render the Secret cert-manager writes")
				}
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_WEBHOOK_CERTS":       "external",
					"FENCEGATE_WEBHOOK_SECRET_NAME": "<unset>",
				})
				if v := volume(r.deploy.Spec.Template.Spec, "webhook-certs"); v == nil || v.Secret == nil || v.Secret.SecretName != webhookSecret {
					t.Errorf("the certificate directory must mount the Secret %s", webhookSecret)
				}
				if len(rulesFor(r.clusterRole.Rules, "validatingwebhookconfigurations")) != 0 {
					t.Error("with cert-manager fencegate needs no right on webhook configurations")
				}
			},
		},
		"the operator's own certificate and CA bundle": {
			values: ci("external-certs-values.yaml"),
			check: func(t *testing.T, r fencegateRender) {
				values := readValues(t, ci("external-certs-values.yaml")[0])
				want := []byte(values["webhook"].(map[string]any)["tls"].(map[string]any)["caBundle"].(string))
				var bundles [][]byte
				for _, w := range r.vwc.Webhooks {
					bundles = append(bundles, w.ClientConfig.CABundle)
				}
				for _, w := range r.mwc.Webhooks {
					bundles = append(bundles, w.ClientConfig.CABundle)
				}
				for _, b := range bundles {
					if !bytes.Equal(b, want) {
						t.Errorf("caBundle = %q, want the values' bundle", b)
					}
				}
				if v := volume(r.deploy.Spec.Template.Spec, "webhook-certs"); v == nil || v.Secret == nil || v.Secret.SecretName != "my-webhook-tls" {
					t.Error("the certificate directory must mount my-webhook-tls")
				}
				if r.has("Secret", webhookSecret) || r.count("Certificate") != 0 {
					t.Error("no Secret or Certificate may be rendered for an existing Secret")
				}
			},
		},
		"several fence domains": {
			values: ci("domains-values.yaml"),
			check: func(t *testing.T, r fencegateRender) {
				wantEnv(t, r.container, map[string]string{"FENCEGATE_DOMAIN": "default", "FENCEGATE_DOMAINS": "payments,search"})
				var failover rbacv1.ClusterRole
				r.get(t, "ClusterRole", fullname+"-failover", &failover)
				if names := failover.Rules[0].ResourceNames; !slices.Equal(names, []string{"default", "payments", "search"}) {
					t.Errorf("the failover ClusterRole names the Fences %v, want every domain's", names)
				}
			},
		},
		"mTLS to the authority": {
			values: ci("authority-mtls-values.yaml"),
			check: func(t *testing.T, r fencegateRender) {
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_AUTHORITY":             "10.20.30.40:7443",
					"FENCEGATE_AUTHORITY_SERVER_NAME": "fence.example.com",
					"FENCEGATE_AUTHORITY_CA":          "/etc/fencegate/authority-tls/ca.crt",
					"FENCEGATE_AUTHORITY_CERT":        "/etc/fencegate/authority-tls/tls.crt",
					"FENCEGATE_AUTHORITY_KEY":         "/etc/fencegate/authority-tls/tls.key",
					"FENCEGATE_DECLARE_INTERVAL":      "2s",
					"FENCEGATE_DECLARE_TIMEOUT":       "1500ms",
				})
				if v := volume(r.deploy.Spec.Template.Spec, "authority-tls"); v == nil || v.Secret.SecretName != "fencegate-authority-client" {
					t.Error("the authority's TLS Secret is not mounted")
				}
			},
		},
		"the client certificate to the authority from cert-manager": {
			values: ci("authority-cert-manager-values.yaml"),
			check: func(t *testing.T, r fencegateRender) {
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_AUTHORITY_CA":   "/etc/fencegate/authority-tls/ca.crt",
					"FENCEGATE_AUTHORITY_CERT": "/etc/fencegate/authority-tls/tls.crt",
					"FENCEGATE_AUTHORITY_KEY":  "/etc/fencegate/authority-tls/tls.key",
				})
				var cert struct {
					Spec struct {
						SecretName string   `json:"secretName"`
						URIs       []string `json:"uris"`
						Usages     []string `json:"usages"`
						IssuerRef  struct {
							Name string `json:"name"`
						} `json:"issuerRef"`
					} `json:"spec"`
				}
				r.get(t, "Certificate", fullname+"-authority-client", &cert)
				v := volume(r.deploy.Spec.Template.Spec, "authority-tls")
				// The identity the authority's authorization file binds to
				// cluster west.
				if v == nil || v.Secret.SecretName != cert.Spec.SecretName || cert.Spec.IssuerRef.Name != "fencegate-clients" ||
					!slices.Equal(cert.Spec.URIs, []string{"spiffe://example.org/fencegate/cluster/west"}) || !slices.Equal(cert.Spec.Usages, []string{"client auth"}) {
					t.Errorf("certificate %+v, mounted %+v: want west's SPIFFE identity from fencegate-clients, in the Secret the pods mount", cert.Spec, v)
				}
			},
		},
		"an operator's policy next to the shipped ones": {
			values: ci("custom-policies-values.yaml"),
			check: func(t *testing.T, r fencegateRender) {
				var policies corev1.ConfigMap
				r.get(t, "ConfigMap", fullname+"-policies", &policies)
				want := shippedPolicies(t, h)
				want["change_window.rego"] = readValues(t, ci("custom-policies-values.yaml")[0])["policies"].(map[string]any)["files"].(map[string]any)["change_window.rego"].(string)
				if !reflect.DeepEqual(policies.Data, want) {
					t.Errorf("policies ConfigMap holds %v, want %v", keys(policies.Data), keys(want))
				}
				if !strings.HasPrefix(r.container.Image, "ghcr.io/fencegate/fencegate@sha256:") {
					t.Errorf("image = %s, want the digest", r.container.Image)
				}
			},
		},
		"warn enforcement, exemptions, fixed cluster UID, one replica": {
			values: ci("warn-exemptions-values.yaml"),
			check: func(t *testing.T, r fencegateRender) {
				want := map[string]any{
					"enforcement":       "warn",
					"exempt_users":      []any{"breakglass-admin"},
					"exempt_groups":     []any{"sre:oncall"},
					"exempt_namespaces": []any{"sandbox"},
					"controller_users":  []any{selfUser, "system:serviceaccount:actuators:component-actuator"},
				}
				if !reflect.DeepEqual(r.config, want) {
					t.Errorf("config.yaml = %v, want %v", r.config, want)
				}
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_CLUSTER_UID":        "5f0c1d7e-2b44-4c3e-9a51-0e2d6f1a9b33",
					"FENCEGATE_LEADER_ELECT":       "false",
					"FENCEGATE_LEADER_ELECTION_ID": "<unset>",
				})
				if slices.ContainsFunc(rulesFor(r.clusterRole.Rules, "namespaces"), readsKubeSystem) {
					t.Error("with a fixed cluster UID the kube-system read must not be granted")
				}
				var role rbacv1.Role
				r.get(t, "Role", fullname, &role)
				for _, rule := range rulesFor(role.Rules, "leases") {
					if slices.Contains(rule.ResourceNames, leaderID) {
						t.Error("without leader election the leader's Lease may not be granted")
					}
				}
				w := r.vwc.Webhooks[0]
				if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.TimeoutSeconds != 3 {
					t.Errorf("failurePolicy %s, timeout %d; want Ignore, 3", *w.FailurePolicy, *w.TimeoutSeconds)
				}
				if !reflect.DeepEqual(w.Rules[0].Resources, []string{"components"}) {
					t.Errorf("validateStatus false must drop components/status, got %v", w.Rules[0].Resources)
				}
				if r.count("PodDisruptionBudget") != 0 {
					t.Error("a PodDisruptionBudget for one replica would block every drain")
				}
				if r.deploy.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
					t.Error("podAntiAffinity hard must require spreading")
				}
				var pod corev1.Pod
				r.get(t, "Pod", fullname+"-test", &pod)
				if got := env(pod.Spec.Containers[0], "EXPECT"); got != "fenced" {
					t.Errorf("helm test EXPECT = %q, want fenced", got)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := renderFencegate(t, h, tc.values)
			checkFencegateInvariants(t, r)
			tc.check(t, r)
		})
	}
}

// checkFencegateInvariants checks what must hold for every values file.
func checkFencegateInvariants(t *testing.T, r fencegateRender) {
	t.Helper()

	// The webhooks: in each configuration the Components' (named
	// validate.fencegate.dev and mutate.fencegate.dev), which see
	// Components and nothing else; and, only when the config fences other
	// kinds (admission.kinds, data.fencegate.config's fenced_kinds), a
	// second webhook (validate.kinds.fencegate.dev, mutate.kinds.fencegate.dev)
	// that sees exactly those kinds, in its order, each by its main
	// resource only. It is set up as the Components' webhook but for a
	// namespaceSelector that, within theirs, always leaves out the release
	// namespace: fencegate's own Deployment stays upgradable.
	type hook struct {
		kind, name string
		rules      []admissionregistrationv1.RuleWithOperations
		cc         admissionregistrationv1.WebhookClientConfig
		side       *admissionregistrationv1.SideEffectClass
		arv        []string
		match      *admissionregistrationv1.MatchPolicyType
		failure    *admissionregistrationv1.FailurePolicyType
		timeout    *int32
		nsSel      *metav1.LabelSelector
		objSel     *metav1.LabelSelector
		reinvoke   *admissionregistrationv1.ReinvocationPolicyType
		path       string
	}
	fenced, _ := r.config["fenced_kinds"].([]any)
	configs := []struct {
		kind, components, kinds string
		hooks                   []hook
	}{
		{kind: "validating", components: "validate.fencegate.dev", kinds: validateKindsHook},
		{kind: "mutating", components: "mutate.fencegate.dev", kinds: mutateKindsHook},
	}
	for _, w := range r.vwc.Webhooks {
		configs[0].hooks = append(configs[0].hooks, hook{"validating", w.Name, w.Rules, w.ClientConfig, w.SideEffects, w.AdmissionReviewVersions, w.MatchPolicy,
			w.FailurePolicy, w.TimeoutSeconds, w.NamespaceSelector, w.ObjectSelector, nil, "/validate"})
	}
	for _, w := range r.mwc.Webhooks {
		configs[1].hooks = append(configs[1].hooks, hook{"mutating", w.Name, w.Rules, w.ClientConfig, w.SideEffects, w.AdmissionReviewVersions, w.MatchPolicy,
			w.FailurePolicy, w.TimeoutSeconds, w.NamespaceSelector, w.ObjectSelector, w.ReinvocationPolicy, "/mutate"})
	}
	wantHooks := 1
	if len(fenced) > 0 {
		wantHooks = 2
	}
	for _, c := range configs {
		if len(c.hooks) != wantHooks {
			t.Fatalf("%d %s webhooks, want %d: the Components' and, for the %d kinds the config fences, the kinds'", len(c.hooks), c.kind, wantHooks, len(fenced))
		}
		components := c.hooks[0]
		if components.name != c.components {
			t.Errorf("the first %s webhook is %q, want the Components' %q", c.kind, components.name, c.components)
		}
		for _, rule := range components.rules {
			if !reflect.DeepEqual(rule.APIGroups, []string{"components.fencegate.dev"}) {
				t.Errorf("%s: a rule for other kinds than Components: %s (admission.kinds has a webhook of its own)", components.name, rulesText([]admissionregistrationv1.RuleWithOperations{rule}))
			}
			for _, res := range rule.Resources {
				if res != "components" && res != "components/status" {
					t.Errorf("%s: resource %q is not a Component", components.name, res)
				}
			}
			if rule.Scope == nil || *rule.Scope != admissionregistrationv1.NamespacedScope {
				t.Errorf("%s: scope must be Namespaced", components.name)
			}
			if c.kind == "mutating" && (slices.Contains(rule.Operations, admissionregistrationv1.Delete) || slices.Contains(rule.Resources, "components/status")) {
				t.Errorf("the mutating webhook has no business with deletes or status of Components: %s", rulesText([]admissionregistrationv1.RuleWithOperations{rule}))
			}
		}
		if len(components.rules) == 0 {
			t.Errorf("%s: no rules", components.name)
		}
		for _, w := range c.hooks {
			if w.side == nil || *w.side != admissionregistrationv1.SideEffectClassNone {
				t.Errorf("%s: sideEffects must be None (dry-run requests need it)", w.name)
			}
			if !reflect.DeepEqual(w.arv, []string{"v1"}) {
				t.Errorf("%s: admissionReviewVersions %v, want [v1]", w.name, w.arv)
			}
			if w.match == nil || *w.match != admissionregistrationv1.Equivalent {
				t.Errorf("%s: matchPolicy must be Equivalent", w.name)
			}
			if s := w.cc.Service; s == nil || s.Name != webhookSvc || s.Namespace != namespace || *s.Path != w.path || *s.Port != 443 {
				t.Errorf("%s: clientConfig %+v, want service %s/%s port 443 path %s", w.name, w.cc.Service, namespace, webhookSvc, w.path)
			}
		}
		if wantHooks == 1 {
			continue
		}

		kinds := c.hooks[1]
		if kinds.name != c.kinds {
			t.Errorf("the second %s webhook is %q, want %q", c.kind, kinds.name, c.kinds)
		}
		if len(kinds.rules) != len(fenced) {
			t.Errorf("%s: %d rules\n%s\nwant one for each kind the config fences %v", kinds.name, len(kinds.rules), rulesText(kinds.rules), fenced)
		}
		for i, rule := range kinds.rules {
			if i < len(fenced) {
				kind, _ := fenced[i].(map[string]any)
				if group, _ := kind["group"].(string); !reflect.DeepEqual(rule.APIGroups, []string{group}) {
					t.Errorf("%s: rule %d has apiGroups %v, want the fenced kind's group %q", kinds.name, i, rule.APIGroups, group)
				}
			}
			if len(rule.Resources) != 1 || strings.Contains(rule.Resources[0], "/") {
				t.Errorf("%s: rule %s must name one main resource, never a subresource: actuators keep writing status", kinds.name, rulesText(kinds.rules[i:i+1]))
			}
			if !reflect.DeepEqual(rule.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}) {
				t.Errorf("%s: rule %s: want the operations CREATE, UPDATE, DELETE", kinds.name, rulesText(kinds.rules[i:i+1]))
			}
			if !reflect.DeepEqual(rule.APIVersions, []string{"*"}) || rule.Scope == nil || *rule.Scope != admissionregistrationv1.AllScopes {
				t.Errorf("%s: rule %s: want every version and scope", kinds.name, rulesText(kinds.rules[i:i+1]))
			}
		}
		excluded, rest, ok := excludedNamespaces(kinds.nsSel)
		within := components.nsSel
		if within == nil {
			within = &metav1.LabelSelector{}
		}
		switch {
		case !ok:
			t.Errorf("%s: namespaceSelector %s, want one %s NotIn expression", kinds.name, metav1.FormatLabelSelector(kinds.nsSel), namespaceNameLabel)
		case len(excluded) == 0 || excluded[0] != namespace:
			t.Errorf("%s: namespaceSelector leaves out %v, want the release namespace %s first", kinds.name, excluded, namespace)
		case !reflect.DeepEqual(rest, within):
			t.Errorf("%s: namespaceSelector %s, want it within the Components' webhook's %s", kinds.name, metav1.FormatLabelSelector(kinds.nsSel), metav1.FormatLabelSelector(components.nsSel))
		}
		if len(excluded) != len(slices.Compact(slices.Sorted(slices.Values(excluded)))) {
			t.Errorf("%s: namespaceSelector leaves out %v, some twice", kinds.name, excluded)
		}
		// The rest as the Components' webhook.
		same := kinds
		same.name, same.rules, same.nsSel = components.name, components.rules, components.nsSel
		if !reflect.DeepEqual(same, components) {
			t.Errorf("%s is set up unlike %s beyond its rules and namespaceSelector", kinds.name, components.name)
		}
	}

	// Least privilege: no wildcard, reads and writes of named objects only
	// where the API allows names, Components read-only.
	var role rbacv1.Role
	rules := r.clusterRole.Rules
	if r.has("Role", fullname) {
		r.get(t, "Role", fullname, &role)
		rules = append(slices.Clone(rules), role.Rules...)
	}
	for _, rule := range rules {
		for _, s := range slices.Concat(rule.Verbs, rule.Resources, rule.APIGroups) {
			if s == "*" {
				t.Errorf("wildcard in rule %v", rule)
			}
		}
		named := slices.ContainsFunc(rule.Resources, func(r string) bool {
			return r == "secrets" || r == "validatingwebhookconfigurations" || r == "mutatingwebhookconfigurations"
		})
		if named && len(rule.ResourceNames) == 0 {
			t.Errorf("rule %v must name its objects", rule)
		}
	}
	for _, rule := range rulesFor(r.clusterRole.Rules, "components") {
		if !reflect.DeepEqual(rule.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("Components must be read-only, got %v", rule.Verbs)
		}
	}
	// Namespaces: the kube-system read, and their domain labels (a cache,
	// and a live read of one it does not know yet), which cannot name
	// objects.
	for _, rule := range rulesFor(r.clusterRole.Rules, "namespaces") {
		readsAll := len(rule.ResourceNames) == 0 && reflect.DeepEqual(rule.Verbs, []string{"get", "list", "watch"})
		if !readsKubeSystem(rule) && !readsAll {
			t.Errorf("namespaces: only get of kube-system, and get, list and watch, got %v", rule)
		}
	}
	for _, rule := range rulesFor(role.Rules, "secrets") {
		if !reflect.DeepEqual(rule.ResourceNames, []string{webhookSecret}) || slices.Contains(rule.Verbs, "create") {
			t.Errorf("secrets: only the webhook Secret, never create, got %v", rule)
		}
	}
	for _, rule := range rulesFor(r.clusterRole.Rules, "validatingwebhookconfigurations") {
		if !reflect.DeepEqual(rule.ResourceNames, []string{fullname}) {
			t.Errorf("webhook configurations: only %s, got %v", fullname, rule.ResourceNames)
		}
	}
	for _, rule := range rulesFor(role.Rules, "leases") {
		if len(rule.ResourceNames) > 0 && !reflect.DeepEqual(rule.ResourceNames, []string{leaderID}) {
			t.Errorf("leases: only %s, got %v", leaderID, rule.ResourceNames)
		}
	}

	// The Fences: only the release's own, one per domain, but for create,
	// which RBAC cannot name, and for list and watch with several domains,
	// which RBAC can narrow to one name only; the failover's ClusterRole
	// may patch those only.
	domains := []string{env(r.container, "FENCEGATE_DOMAIN")}
	if more := env(r.container, "FENCEGATE_DOMAINS"); more != "<unset>" {
		domains = append(domains, strings.Split(more, ",")...)
	}
	for _, res := range []string{"fences", "fences/status"} {
		rules := rulesFor(r.clusterRole.Rules, res)
		if len(rules) == 0 {
			t.Errorf("no rule grants %s: fencegate run creates, watches and writes the status of its Fences", res)
		}
		for _, rule := range rules {
			listsAll := len(domains) > 1 && res == "fences" && reflect.DeepEqual(rule.Verbs, []string{"list", "watch"})
			if !reflect.DeepEqual(rule.Verbs, []string{"create"}) && !listsAll && !reflect.DeepEqual(rule.ResourceNames, domains) {
				t.Errorf("%s: only the Fences %q, got %v", res, domains, rule)
			}
		}
	}
	var failover rbacv1.ClusterRole
	r.get(t, "ClusterRole", fullname+"-failover", &failover)
	if want := []rbacv1.PolicyRule{{APIGroups: []string{"components.fencegate.dev"}, Resources: []string{"fences"}, ResourceNames: domains, Verbs: []string{"get", "list", "watch", "patch"}}}; !reflect.DeepEqual(failover.Rules, want) {
		t.Errorf("the failover ClusterRole grants %v, want %v", failover.Rules, want)
	}

	// The controller may always write status.
	if users, _ := r.config["controller_users"].([]any); !slices.Contains(users, any(selfUser)) {
		t.Errorf("controller_users %v lack the chart's own service account %s", users, selfUser)
	}

	// A restricted pod with probes on the health port.
	spec := r.deploy.Spec.Template.Spec
	psc, sc := spec.SecurityContext, r.container.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod must run as non-root with the RuntimeDefault seccomp profile")
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Error("the container must have a read-only root, no privilege escalation and drop ALL capabilities")
	}
	for name, p := range map[string]*corev1.Probe{"liveness": r.container.LivenessProbe, "readiness": r.container.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "health" {
			t.Errorf("%s probe must be an HTTP GET on the health port", name)
		}
	}
	if r.container.ReadinessProbe.HTTPGet.Path != "/readyz" || r.container.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("probes must use /readyz and /healthz")
	}
	if r.container.Resources.Requests.Memory().IsZero() || r.container.Resources.Requests.Cpu().IsZero() {
		t.Error("the container must request CPU and memory")
	}
	for k := range r.deploy.Spec.Template.Annotations {
		if strings.HasPrefix(k, "checksum/") {
			t.Errorf("pod annotation %s would roll the pods on a policy edit, which fencegate reloads in place", k)
		}
	}
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestFailoverBinding: the failover ClusterRole is bound to the groups
// failover.groups lists, and to nobody by default.
func TestFailoverBinding(t *testing.T) {
	h := newHelm(t)
	values := []string{filepath.Join(h.chartDir(fencegateChart), "ci", "defaults-values.yaml")}
	if r := renderFencegate(t, h, values); r.has("ClusterRoleBinding", fullname+"-failover") {
		t.Error("the failover ClusterRole is bound by default; bind it only to the groups failover.groups lists")
	}
	r := renderFencegate(t, h, values, "--set", "failover.groups={sre,platform-oncall}")
	var binding rbacv1.ClusterRoleBinding
	r.get(t, "ClusterRoleBinding", fullname+"-failover", &binding)
	want := []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "sre"}, {Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "platform-oncall"}}
	if binding.RoleRef.Name != fullname+"-failover" || !reflect.DeepEqual(binding.Subjects, want) {
		t.Errorf("failover binding: role %s, subjects %v; want %s-failover, %v", binding.RoleRef.Name, binding.Subjects, fullname, want)
	}
}

// TestEpochRollsThePodsPolicyEditsDoNot: raising the epoch must roll the
// pods (a new declaration), while policy and settings edits must not (the
// binary reloads them in place).
func TestEpochRollsThePodsPolicyEditsDoNot(t *testing.T) {
	h := newHelm(t)
	values := []string{filepath.Join(h.chartDir(fencegateChart), "ci", "defaults-values.yaml")}
	base := renderFencegate(t, h, values).deploy.Spec.Template

	tests := map[string]struct {
		set   []string
		rolls bool
	}{
		"epoch raised":            {set: []string{"epoch=8"}, rolls: true},
		"enforcement changed":     {set: []string{"config.enforcement=warn"}},
		"exemption added":         {set: []string{"config.exemptUsers={breakglass}"}},
		"policy file added":       {set: []string{"policies.files.extra\\.rego=package extra"}},
		"webhook timeout changed": {set: []string{"webhook.timeoutSeconds=4"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var extra []string
			for _, s := range tc.set {
				extra = append(extra, "--set", s)
			}
			got := renderFencegate(t, h, values, extra...).deploy.Spec.Template
			if rolls := !reflect.DeepEqual(got, base); rolls != tc.rolls {
				t.Errorf("pod template changed = %v, want %v", rolls, tc.rolls)
			}
		})
	}
}

func TestFencegateValuesAreChecked(t *testing.T) {
	h := newHelm(t)
	valid := []string{"--set", "clusterName=east", "--set", "epoch=7", "--set", "authority.address=fence.example.com:7443"}
	tests := map[string]struct {
		args []string
		want string
	}{
		"no epoch":                     {args: []string{"--set", "clusterName=east", "--set", "authority.address=a:1"}, want: "missing property 'epoch'"},
		"no cluster name":              {args: []string{"--set", "epoch=7", "--set", "authority.address=a:1"}, want: "missing property 'clusterName'"},
		"no authority":                 {args: []string{"--set", "clusterName=east", "--set", "epoch=7"}, want: "at '/authority': missing property 'address'"},
		"epoch zero":                   {args: append(slices.Clone(valid), "--set", "epoch=0"), want: "at '/epoch': minimum: got 0, want 1"},
		"epoch not a number":           {args: append(slices.Clone(valid), "--set-string", "epoch=seven"), want: "at '/epoch'"},
		"cluster name not a DNS label": {args: append(slices.Clone(valid), "--set", "clusterName=East_1"), want: "at '/clusterName'"},
		"authority without a port":     {args: append(slices.Clone(valid), "--set", "authority.address=fence.example.com"), want: "at '/authority/address'"},
		"unknown enforcement":          {args: append(slices.Clone(valid), "--set", "config.enforcement=block"), want: "at '/config/enforcement'"},
		"misspelt top-level value":     {args: append(slices.Clone(valid), "--set", "epcoh=8"), want: "additional properties 'epcoh' not allowed"},
		"failure policy":               {args: append(slices.Clone(valid), "--set", "webhook.failurePolicy=Never"), want: "at '/webhook/failurePolicy'"},
		"policy file name":             {args: append(slices.Clone(valid), "--set", "policies.files.extra\\.txt=x"), want: "'extra.txt' does not match pattern"},
		"existing secret without a CA": {args: append(slices.Clone(valid), "--set", "webhook.tls.existingSecret=mine"), want: "webhook.tls.caBundle must hold the PEM CA"},
		"insecure with TLS":            {args: append(slices.Clone(valid), "--set", "authority.insecure=true", "--set", "authority.tls.secretName=x"), want: "authority.insecure excludes authority.tls.secretName"},
		"client certificate from cert-manager without an issuer": {
			args: append(slices.Clone(valid), "--set", "authority.tls.certManager.enabled=true"), want: "needs authority.tls.certManager.issuerRef.name",
		},
		"client certificate, no Secret": {args: append(slices.Clone(valid), "--set", "authority.tls.clientCertificate=true"), want: "needs authority.tls.secretName"},
		"failover groups not a list":    {args: append(slices.Clone(valid), "--set", "failover.groups=sre"), want: "at '/failover/groups'"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := h.template(t.Context(), fencegateChart, nil, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestFencegateTimingIsChecked: the chart refuses timings that break the
// lease margin: a webhook timeout not below the lease margin (the API server
// could take an answer decided just before this cluster's active state
// ended after the authority moved the fence), a margin not below the
// authority's lease TTL, and a lease TTL below three declare intervals. The
// defaults and the ci values pass.
func TestFencegateTimingIsChecked(t *testing.T) {
	h := newHelm(t)
	valid := []string{"--set", "clusterName=east", "--set", "epoch=7", "--set", "authority.address=fence.example.com:7443"}
	with := func(set ...string) []string {
		args := slices.Clone(valid)
		for _, s := range set {
			args = append(args, "--set", s)
		}
		return args
	}
	const (
		timeoutRule = "must be below authority.leaseMargin"
		marginRule  = "must be below authority.leaseTTL"
		ttlRule     = "is below three authority.declareInterval"
	)
	tests := map[string]struct {
		args []string
		// want is a part of the refusal; empty: the chart renders, with
		// wantEnv in the Deployment.
		want    []string
		wantEnv map[string]string
	}{
		"defaults": {
			args:    valid,
			wantEnv: map[string]string{"FENCEGATE_LEASE_MARGIN": "6s", "FENCEGATE_DECLARE_INTERVAL": "5s"},
		},
		"webhook timeout just below the margin": {
			args:    with("webhook.timeoutSeconds=5", "authority.leaseMargin=5001ms"),
			wantEnv: map[string]string{"FENCEGATE_LEASE_MARGIN": "5001ms"},
		},
		"webhook timeout equal to the margin": {
			args: with("webhook.timeoutSeconds=6"),
			want: []string{"webhook.timeoutSeconds (6) must be below authority.leaseMargin (6s)", "Lower webhook.timeoutSeconds below 6s, or raise authority.leaseMargin above 6s"},
		},
		"webhook timeout above the margin": {
			args: with("webhook.timeoutSeconds=10", "authority.leaseMargin=2s"),
			want: []string{"webhook.timeoutSeconds (10) must be below authority.leaseMargin (2s)", "raise authority.leaseMargin above 10s (and keep it below authority.leaseTTL, 15s)"},
		},
		"webhook timeout above a margin in minutes and seconds": {
			args: with("webhook.timeoutSeconds=30", "authority.leaseMargin=0m29.5s", "authority.leaseTTL=2m"),
			want: []string{timeoutRule},
		},
		"short timings for a fast failover": {
			args:    with("webhook.timeoutSeconds=1", "authority.leaseMargin=1500ms", "authority.leaseTTL=6s", "authority.declareInterval=2s", "authority.declareTimeout=1s"),
			wantEnv: map[string]string{"FENCEGATE_LEASE_MARGIN": "1500ms", "FENCEGATE_DECLARE_INTERVAL": "2s"},
		},
		"margin as long as the lease": {
			args: with("webhook.timeoutSeconds=5", "authority.leaseMargin=15s"),
			want: []string{"authority.leaseMargin (15s) must be below authority.leaseTTL (15s)"},
		},
		"lease TTL of exactly three declare intervals": {
			args:    with("authority.leaseTTL=1m", "authority.declareInterval=20s"),
			wantEnv: map[string]string{"FENCEGATE_DECLARE_INTERVAL": "20s"},
		},
		"lease TTL below three declare intervals": {
			args: with("authority.leaseTTL=14s"),
			want: []string{"authority.leaseTTL (14s) is below three authority.declareInterval (3 × 5s)", "Set authority.declareInterval to a third of the lease TTL or less"},
		},
		"declare interval raised above a third of the lease TTL": {
			args: with("authority.declareInterval=5001ms"),
			want: []string{ttlRule},
		},
		"declare interval in hours": {
			args: with("authority.declareInterval=1h"),
			want: []string{ttlRule},
		},
		"lease margin that is not a duration": {
			args: with("authority.leaseMargin=6"),
			want: []string{"at '/authority/leaseMargin'"},
		},
		"lease TTL that is not a duration": {
			args: with("authority.leaseTTL=15 s"),
			want: []string{"at '/authority/leaseTTL'"},
		},
		"lease margin set around the check": {
			args: with("extraEnv[0].name=FENCEGATE_LEASE_MARGIN", "extraEnv[0].value=1s"),
			want: []string{"extraEnv sets FENCEGATE_LEASE_MARGIN: set authority.leaseMargin instead"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if len(tc.want) == 0 {
				r := renderFencegate(t, h, nil, tc.args...)
				wantEnv(t, r.container, tc.wantEnv)
				return
			}
			_, err := h.template(t.Context(), fencegateChart, nil, tc.args...)
			if err == nil {
				t.Fatalf("helm template passed, want a refusal containing %q", tc.want)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("helm template error = %v, want one containing %q", err, want)
				}
			}
		})
	}

	// Every ci values file keeps to the rules (helm lint only logs a fail).
	for _, file := range h.ciValues(t, fencegateChart) {
		if _, err := h.template(t.Context(), fencegateChart, []string{file}); err != nil {
			t.Errorf("%s: %v", filepath.Base(file), err)
		}
	}
}

// readsKubeSystem is the rule that lets fencegate read the cluster UID.
func readsKubeSystem(rule rbacv1.PolicyRule) bool {
	return reflect.DeepEqual(rule.ResourceNames, []string{"kube-system"}) && reflect.DeepEqual(rule.Verbs, []string{"get"})
}
