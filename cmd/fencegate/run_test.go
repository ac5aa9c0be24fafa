package main

import (
	"context"
	"strings"
	"testing"
)

func TestRunFlagErrors(t *testing.T) {
	// valid are the flags of a cluster that can start; each case breaks them.
	valid := []string{"--cluster-name", "east", "--epoch", "1", "--authority", "127.0.0.1:7443",
		"--webhook-certs", "external", "--kubeconfig", "/nonexistent/kubeconfig"}
	tests := map[string]struct {
		args    []string
		env     map[string]string
		wantErr []string
	}{
		"nothing given names every required flag": {
			args: []string{},
			wantErr: []string{
				"set --cluster-name (FENCEGATE_CLUSTER_NAME)",
				"set --epoch (FENCEGATE_EPOCH) to 1 or more",
				"--namespace (FENCEGATE_NAMESPACE): required with --webhook-certs=self-signed",
				"--webhook-service-name (FENCEGATE_WEBHOOK_SERVICE_NAME)",
				"--validating-webhook-configuration (FENCEGATE_VALIDATING_WEBHOOK_CONFIGURATION)",
			},
		},
		"cluster name that is not a DNS label": {
			args:    append(valid, "--cluster-name", "East_1"),
			wantErr: []string{`cluster name "East_1" is not a DNS label`},
		},
		"epoch from the environment": {
			args:    []string{"--cluster-name", "east", "--authority", "127.0.0.1:7443", "--webhook-certs", "external"},
			env:     map[string]string{"FENCEGATE_EPOCH": "0"},
			wantErr: []string{"epoch is 0"},
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
		"leader election outside a cluster without a namespace": {
			args:    append(valid, "--leader-elect"),
			wantErr: []string{"--leader-election-namespace (FENCEGATE_LEADER_ELECTION_NAMESPACE): required with --leader-elect outside a cluster"},
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
