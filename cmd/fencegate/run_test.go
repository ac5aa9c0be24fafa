package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRunFlagErrors(t *testing.T) {
	// valid are the flags of a cluster that can start; each case breaks them.
	valid := []string{"--cluster-name", "east", "--epoch", "1", "--authority", "127.0.0.1:7443",
		"--webhook-certs", "external", "--kubeconfig", "/nonexistent/kubeconfig", "--namespace", "fencegate-system"}
	// reachable gets as far as the fence agent's settings, which are
	// checked before any call to the API server when the cluster UID is
	// given: its kubeconfig names a server that nothing needs to reach.
	reachable := []string{"--authority", "127.0.0.1:7443", "--webhook-certs", "external", "--namespace", "fencegate-system",
		"--kubeconfig", unreachableKubeconfig(t), "--cluster-uid", "uid-east", "--metrics-address", "0", "--health-address", "127.0.0.1:0"}
	tests := map[string]struct {
		args    []string
		env     map[string]string
		wantErr []string
	}{
		"nothing given names every required flag": {
			args: []string{},
			wantErr: []string{
				"--namespace (FENCEGATE_NAMESPACE): required: each fencegate process keeps a Lease there",
				"--webhook-service-name (FENCEGATE_WEBHOOK_SERVICE_NAME)",
				"--validating-webhook-configuration (FENCEGATE_VALIDATING_WEBHOOK_CONFIGURATION)",
			},
		},
		// One case only gets this far: run registers its metrics in
		// controller-runtime's global registry, once per process.
		"every fence agent setting at once, from flags and variables": {
			args: append(slices.Clone(reachable), "--instance", "pod 1"),
			env:  map[string]string{"FENCEGATE_EPOCH": "0"},
			wantErr: []string{
				"cluster name is empty: set --cluster-name (FENCEGATE_CLUSTER_NAME)",
				"epoch is 0: epochs start at 1: set --epoch (FENCEGATE_EPOCH) to 1 or more",
				`instance name "pod 1" contains spaces or control characters: set --instance (FENCEGATE_INSTANCE)`,
			},
		},
		"epoch that is not a number": {
			args:    append(valid, "--epoch", "seven"),
			wantErr: []string{`invalid argument "seven" for "--epoch"`},
		},
		"unknown certificate mode": {
			args:    append(valid, "--webhook-certs", "auto"),
			wantErr: []string{`--webhook-certs (FENCEGATE_WEBHOOK_CERTS): "auto": want self-signed or external`},
		},
		"timeout not shorter than the interval": {
			args:    append(valid, "--declare-timeout", "5s"),
			wantErr: []string{"--declare-timeout (FENCEGATE_DECLARE_TIMEOUT): 5s must be positive and shorter than --declare-interval 5s"},
		},
		"authority without a port": {
			args:    append(valid, "--authority", "fence.example.com"),
			wantErr: []string{`--authority "fence.example.com": want host:port`},
		},
		"half a client certificate": {
			args:    append(valid, "--authority-cert", "tls.crt"),
			wantErr: []string{"a client certificate needs both a certificate file and a key file"},
		},
		"valid flags get as far as the kubeconfig": {
			args:    valid,
			wantErr: []string{"--kubeconfig (FENCEGATE_KUBECONFIG)", "/nonexistent/kubeconfig"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, _, err := runRoot(context.Background(), append([]string{"run"}, tc.args...)...)
			if err == nil {
				t.Fatal("run started, want an error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

// unreachableKubeconfig writes a kubeconfig whose server nothing listens
// on, for flags that must be checked before any call to it.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const config = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
