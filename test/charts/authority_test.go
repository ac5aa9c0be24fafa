package charts

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/fencegate/fencegate/authority/authz"
)

const authorityName = "fg-fencegate-authority"

func TestAuthorityChart(t *testing.T) {
	h := newHelm(t)
	ci := func(name string) []string { return []string{filepath.Join(h.chartDir(authorityChart), "ci", name)} }

	type authorityRender struct {
		rendered
		sts       appsv1.StatefulSet
		container corev1.Container
		svc       corev1.Service
	}
	tests := map[string]struct {
		values []string
		check  func(t *testing.T, r authorityRender)
	}{
		"embedded etcd on a retained volume, TLS": {
			values: ci("embedded-tls-values.yaml"),
			check: func(t *testing.T, r authorityRender) {
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_DATA_DIR":       "/var/lib/fencegate",
					"FENCEGATE_TLS_CERT":       "/etc/fencegate/tls/tls.crt",
					"FENCEGATE_TLS_KEY":        "/etc/fencegate/tls/tls.key",
					"FENCEGATE_CLIENT_CA":      "<unset>",
					"FENCEGATE_INSECURE":       "<unset>",
					"FENCEGATE_ETCD_ENDPOINTS": "<unset>",
					"FENCEGATE_LEASE_TTL":      "15s",
				})
				if *r.sts.Spec.Replicas != 1 {
					t.Errorf("replicas = %d, want 1 with the embedded etcd", *r.sts.Spec.Replicas)
				}
				if len(r.sts.Spec.VolumeClaimTemplates) != 1 || r.sts.Spec.VolumeClaimTemplates[0].Name != "data" {
					t.Fatal("the embedded etcd needs the data volume claim")
				}
				if p := r.sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
					t.Error("the fence state must survive an uninstall by default")
				}
				if r.count("PodDisruptionBudget") != 0 {
					t.Error("a disruption budget on the single embedded replica would block every drain")
				}
			},
		},
		"embedded etcd, mTLS, load balancer": {
			values: ci("embedded-mtls-loadbalancer-values.yaml"),
			check: func(t *testing.T, r authorityRender) {
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_CLIENT_CA":          "/etc/fencegate/tls/ca.crt",
					"FENCEGATE_LEASE_TTL":          "10s",
					"FENCEGATE_AUTHORIZATION_FILE": "/etc/fencegate/authorization/authorization.yaml",
					"FENCEGATE_AUTHORIZATION":      "<unset>",
				})
				var cm corev1.ConfigMap
				r.get(t, "ConfigMap", authorityName+"-authorization", &cm)
				file, err := authz.Parse([]byte(cm.Data["authorization.yaml"]))
				if err != nil {
					t.Fatalf("the rendered authorization file does not parse: %v", err)
				}
				for id, want := range map[string]bool{"spiffe://example.org/fencegate/cluster/east": true, "spiffe://example.org/fencegate/cluster/mallory": false} {
					d := file.Authorize(id, authz.Request{Method: authz.MethodDeclare, Domain: "default", Cluster: "east"})
					if d.Allowed != want {
						t.Errorf("%s declares as east: allowed %v, want %v (%s)", id, d.Allowed, want, d.Reason)
					}
				}
				// Mounted whole, so that the kubelet's update reaches the
				// file the authority watches.
				if !slices.ContainsFunc(r.container.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == "authorization" && m.MountPath == "/etc/fencegate/authorization" && m.SubPath == ""
				}) {
					t.Errorf("the authorization ConfigMap is not mounted whole: %+v", r.container.VolumeMounts)
				}
				if r.svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(r.svc.Spec.LoadBalancerSourceRanges) != 2 ||
					r.svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
					t.Errorf("service %+v, want a LoadBalancer with two source ranges and Local traffic", r.svc.Spec)
				}
				claim := r.sts.Spec.VolumeClaimTemplates[0].Spec
				if *claim.StorageClassName != "fast-ssd" || claim.Resources.Requests.Storage().String() != "2Gi" {
					t.Errorf("volume claim %+v, want 2Gi of fast-ssd", claim)
				}
			},
		},
		"external etcd, three replicas, disruption budget": {
			values: ci("external-etcd-values.yaml"),
			check: func(t *testing.T, r authorityRender) {
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_ETCD_ENDPOINTS": "https://etcd-0.etcd.example.com:2379,https://etcd-1.etcd.example.com:2379,https://etcd-2.etcd.example.com:2379",
					"FENCEGATE_ETCD_CA":        "/etc/fencegate/etcd-tls/ca.crt",
					"FENCEGATE_ETCD_CERT":      "/etc/fencegate/etcd-tls/tls.crt",
					"FENCEGATE_ETCD_KEY":       "/etc/fencegate/etcd-tls/tls.key",
					"FENCEGATE_DATA_DIR":       "<unset>",
				})
				if *r.sts.Spec.Replicas != 3 || len(r.sts.Spec.VolumeClaimTemplates) != 0 {
					t.Error("with an external etcd: 3 replicas and no volume")
				}
				var pdb policyv1.PodDisruptionBudget
				r.get(t, "PodDisruptionBudget", authorityName, &pdb)
				if pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
				}
			},
		},
		"the serving certificate from cert-manager": {
			values: ci("cert-manager-values.yaml"),
			check: func(t *testing.T, r authorityRender) {
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_TLS_CERT":  "/etc/fencegate/tls/tls.crt",
					"FENCEGATE_CLIENT_CA": "/etc/fencegate/tls/ca.crt",
				})
				var cert struct {
					Spec struct {
						SecretName string   `json:"secretName"`
						DNSNames   []string `json:"dnsNames"`
						Usages     []string `json:"usages"`
						IssuerRef  struct {
							Name string `json:"name"`
						} `json:"issuerRef"`
					} `json:"spec"`
				}
				r.get(t, "Certificate", authorityName, &cert)
				secret := ""
				for _, v := range r.sts.Spec.Template.Spec.Volumes {
					if v.Name == "tls" && v.Secret != nil {
						secret = v.Secret.SecretName
					}
				}
				if cert.Spec.SecretName == "" || cert.Spec.SecretName != secret || cert.Spec.IssuerRef.Name != "fencegate-ca" ||
					!slices.Equal(cert.Spec.DNSNames, []string{"fence.example.com"}) || !slices.Equal(cert.Spec.Usages, []string{"server auth"}) {
					t.Errorf("certificate %+v, pods mount %q: want the Secret the pods mount, from fencegate-ca, for fence.example.com", cert.Spec, secret)
				}
			},
		},
		"plaintext lab": {
			values: ci("insecure-lab-values.yaml"),
			check: func(t *testing.T, r authorityRender) {
				wantEnv(t, r.container, map[string]string{
					"FENCEGATE_INSECURE":      "true",
					"FENCEGATE_TLS_CERT":      "<unset>",
					"FENCEGATE_AUTHORIZATION": "none",
				})
				if p := r.sts.Spec.PersistentVolumeClaimRetentionPolicy; p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
					t.Error("persistence.retain false must delete the volume with the release")
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := authorityRender{rendered: h.render(t, authorityChart, tc.values)}
			r.get(t, "StatefulSet", authorityName, &r.sts)
			r.get(t, "Service", authorityName, &r.svc)
			r.container = r.sts.Spec.Template.Spec.Containers[0]

			// What every values file keeps.
			spec := r.sts.Spec.Template.Spec
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the authority never calls the Kubernetes API: no service account token")
			}
			if r.count("Role")+r.count("ClusterRole")+r.count("RoleBinding")+r.count("ClusterRoleBinding") != 0 {
				t.Error("the authority needs no RBAC")
			}
			sc := r.container.SecurityContext
			if spec.SecurityContext == nil || !*spec.SecurityContext.RunAsNonRoot || sc == nil || !*sc.ReadOnlyRootFilesystem ||
				*sc.AllowPrivilegeEscalation || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Error("the authority must run restricted: non-root, read-only root, no escalation, no capabilities")
			}
			for name, p := range map[string]*corev1.Probe{"startup": r.container.StartupProbe, "liveness": r.container.LivenessProbe, "readiness": r.container.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "metrics" {
					t.Errorf("%s probe must be an HTTP GET on the metrics port", name)
				}
			}
			if !slices.ContainsFunc(r.svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc" && p.TargetPort.String() == "grpc" }) {
				t.Error("the Service must expose the gRPC port")
			}
			if got := env(r.container, "FENCEGATE_LISTEN"); got != "0.0.0.0:7443" {
				t.Errorf("FENCEGATE_LISTEN = %s", got)
			}
			tc.check(t, r)
		})
	}
}

func TestAuthorityValuesAreChecked(t *testing.T) {
	h := newHelm(t)
	tests := map[string]struct {
		args []string
		want string
	}{
		"neither TLS nor plaintext chosen": {want: "the authority needs tls.secretName"},
		"two replicas on the embedded etcd": {
			args: []string{"--set", "tls.secretName=t", "--set", "authorization.none=true", "--set", "replicaCount=2"},
			want: "replicaCount is 2, but the embedded etcd allows 1",
		},
		"TLS and plaintext": {
			args: []string{"--set", "tls.secretName=t", "--set", "insecure=true"},
			want: "insecure excludes tls.secretName and tls.certManager",
		},
		"TLS without client certificates, nobody told apart": {
			args: []string{"--set", "tls.secretName=t"},
			want: "without tls.clientAuth the authority cannot tell its callers apart",
		},
		"client certificates without an authorization file": {
			args: []string{"--set", "tls.secretName=t", "--set", "tls.clientAuth=true"},
			want: "tls.clientAuth needs authorization",
		},
		"an authorization file without client certificates": {
			args: []string{"--set", "tls.secretName=t", "--set", "authorization.operators={spiffe://x/oncall}"},
			want: "authorization needs tls.clientAuth",
		},
		"an authorization file and none": {
			args: []string{"--set", "tls.secretName=t", "--set", "tls.clientAuth=true", "--set", "authorization.operators={spiffe://x/oncall}", "--set", "authorization.none=true"},
			want: "authorization.none and authorization entries exclude each other",
		},
		"a cluster binding that names no DNS label": {
			args: []string{"--set", "tls.secretName=t", "--set", "tls.clientAuth=true", "--set", "authorization.clusters[0].identity=spiffe://x/east",
				"--set", "authorization.clusters[0].cluster=East_1", "--set", "authorization.clusters[0].domains={*}"},
			want: "at '/authorization/clusters/0/cluster'",
		},
		"cert-manager without an issuer": {
			args: []string{"--set", "tls.certManager.enabled=true", "--set", "tls.certManager.dnsNames={fence.example.com}", "--set", "authorization.none=true"},
			want: "tls.certManager.enabled needs tls.certManager.issuerRef.name",
		},
		"client auth without a Secret": {
			args: []string{"--set", "insecure=true", "--set", "tls.clientAuth=true"},
			want: "tls.clientAuth needs tls.secretName or tls.certManager.enabled",
		},
		"etcd TLS without endpoints": {
			args: []string{"--set", "insecure=true", "--set", "authorization.none=true", "--set", "etcd.tls.secretName=e"},
			want: "etcd.tls.secretName is for an external etcd",
		},
		"etcd endpoint without a scheme": {
			args: []string{"--set", "insecure=true", "--set", "etcd.endpoints={etcd-0:2379}"},
			want: "at '/etcd/endpoints/0'",
		},
		"lease TTL not a duration": {
			args: []string{"--set", "insecure=true", "--set", "leaseTTL=15"},
			want: "at '/leaseTTL'",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := h.template(t.Context(), authorityChart, nil, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestAuthorityLeaseIsChecked: the chart refuses a lease TTL below three
// declare intervals of the clusters (clusterDeclareInterval, the fencegate
// chart's authority.declareInterval); the defaults pass.
func TestAuthorityLeaseIsChecked(t *testing.T) {
	h := newHelm(t)
	with := func(set ...string) []string {
		args := []string{"--set", "insecure=true", "--set", "authorization.none=true"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		return args
	}
	tests := map[string]struct {
		args []string
		// want is a part of the refusal; empty: the chart renders, with
		// this FENCEGATE_LEASE_TTL.
		want    []string
		wantTTL string
	}{
		"defaults":                             {args: with(), wantTTL: "15s"},
		"lease TTL of exactly three intervals": {args: with("leaseTTL=6s", "clusterDeclareInterval=2s"), wantTTL: "6s"},
		"lease TTL in minutes":                 {args: with("leaseTTL=1m30s", "clusterDeclareInterval=30s"), wantTTL: "1m30s"},
		"lease TTL below three intervals": {
			args: with("leaseTTL=10s"),
			want: []string{"leaseTTL (10s) is below three clusterDeclareInterval (3 × 5s)", "set clusterDeclareInterval to the longest of their intervals"},
		},
		"lease TTL just below three intervals": {
			args: with("leaseTTL=5999ms", "clusterDeclareInterval=2s"),
			want: []string{"is below three clusterDeclareInterval"},
		},
		"declare interval not a duration": {
			args: with("clusterDeclareInterval=5"),
			want: []string{"at '/clusterDeclareInterval'"},
		},
		"lease TTL set around the check": {
			args: with("extraEnv[0].name=FENCEGATE_LEASE_TTL", "extraEnv[0].value=1s"),
			want: []string{"extraEnv sets FENCEGATE_LEASE_TTL: set leaseTTL instead"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if len(tc.want) == 0 {
				r := h.render(t, authorityChart, nil, tc.args...)
				var sts appsv1.StatefulSet
				r.get(t, "StatefulSet", authorityName, &sts)
				if got := env(sts.Spec.Template.Spec.Containers[0], "FENCEGATE_LEASE_TTL"); got != tc.wantTTL {
					t.Errorf("FENCEGATE_LEASE_TTL = %q, want %q", got, tc.wantTTL)
				}
				return
			}
			_, err := h.template(t.Context(), authorityChart, nil, tc.args...)
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

	// Every ci values file keeps to the rule (helm lint only logs a fail).
	for _, file := range h.ciValues(t, authorityChart) {
		if _, err := h.template(t.Context(), authorityChart, []string{file}); err != nil {
			t.Errorf("%s: %v", filepath.Base(file), err)
		}
	}
}
