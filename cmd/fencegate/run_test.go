package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/internal/cli/clitest"
)

// TestRunSettingErrors: run checks every setting, the fence agent's
// included, before it reads a kubeconfig or dials anything, and reports
// every problem at once, each naming its flag and variable.
func TestRunSettingErrors(t *testing.T) {
	// base are the flags of a cluster that can start, but for its name and
	// epoch; its kubeconfig does not exist, so an error that names it shows
	// that run got past its settings to the first step that reaches out.
	base := []string{"--authority", "127.0.0.1:7443", "--webhook-certs", "external",
		"--kubeconfig", "/nonexistent/kubeconfig", "--namespace", "fencegate-system"}
	valid := append(slices.Clone(base), "--cluster-name", "east", "--epoch", "1")
	const kubeconfigReached = "--kubeconfig (FENCEGATE_KUBECONFIG)"
	tests := map[string]struct {
		args []string
		env  map[string]string
		// wantErr lists what the error must say, notErr what it must not.
		wantErr, notErr []string
	}{
		"nothing given names every required flag": {
			args: []string{},
			wantErr: []string{
				"cluster name is empty: set --cluster-name (FENCEGATE_CLUSTER_NAME)",
				"epoch is 0: epochs start at 1: set --epoch (FENCEGATE_EPOCH) to 1 or more",
				"--namespace (FENCEGATE_NAMESPACE): required: each fencegate process keeps a Lease there",
				"--webhook-service-name (FENCEGATE_WEBHOOK_SERVICE_NAME)",
				"--validating-webhook-configuration (FENCEGATE_VALIDATING_WEBHOOK_CONFIGURATION)",
			},
		},
		"a cluster name alone names the missing epoch with the other missing flags": {
			args: []string{"--cluster-name", "east"},
			wantErr: []string{
				"epoch is 0: epochs start at 1: set --epoch (FENCEGATE_EPOCH) to 1 or more",
				"--namespace (FENCEGATE_NAMESPACE): required",
				"--webhook-service-name (FENCEGATE_WEBHOOK_SERVICE_NAME)",
				"--validating-webhook-configuration (FENCEGATE_VALIDATING_WEBHOOK_CONFIGURATION)",
			},
			notErr: []string{"cluster name"},
		},
		"every fence agent setting at once, from flags and variables, before the kubeconfig": {
			args: append(slices.Clone(base), "--instance", "pod 1", "--domain", "Payments!", "--cluster-uid", "a b"),
			env:  map[string]string{"FENCEGATE_EPOCH": "0", "FENCEGATE_CLUSTER_NAME": "East_1"},
			wantErr: []string{
				`cluster name "East_1" is not a DNS label`, "set --cluster-name (FENCEGATE_CLUSTER_NAME)",
				"epoch is 0: epochs start at 1: set --epoch (FENCEGATE_EPOCH) to 1 or more",
				`instance name "pod 1" contains spaces or control characters: set --instance (FENCEGATE_INSTANCE)`,
				`fence domain "Payments!"`, "set --domain (FENCEGATE_DOMAIN)",
				`cluster UID "a b" contains spaces or control characters`, "--cluster-uid (FENCEGATE_CLUSTER_UID)",
			},
			notErr: []string{kubeconfigReached},
		},
		"further domains are checked by name and number": {
			args: append(slices.Clone(valid), "--domains", "payments,Search!"),
			wantErr: []string{
				`--domains (FENCEGATE_DOMAINS): domain: "Search!" is not a DNS label`,
			},
			notErr: []string{kubeconfigReached},
		},
		"more domains than one fencegate serves": {
			env:     map[string]string{"FENCEGATE_DOMAINS": manyDomains(domain.MaxServed)},
			args:    valid,
			wantErr: []string{"--domains (FENCEGATE_DOMAINS): 101 domains: one fencegate serves at most 100"},
			notErr:  []string{kubeconfigReached},
		},
		"domains from the variable, the default among them once": {
			env:     map[string]string{"FENCEGATE_DOMAINS": "payments,default,search"},
			args:    valid,
			wantErr: []string{kubeconfigReached},
			notErr:  []string{"domain"},
		},
		"a cluster UID with spaces around it is taken trimmed": {
			args:    append(slices.Clone(valid), "--cluster-uid", " uid-east "),
			wantErr: []string{kubeconfigReached},
			notErr:  []string{"cluster UID"},
		},
		"epoch that is not a number": {
			args:    append(slices.Clone(valid), "--epoch", "seven"),
			wantErr: []string{`invalid argument "seven" for "--epoch"`},
		},
		"unknown certificate mode": {
			args:    append(slices.Clone(valid), "--webhook-certs", "auto"),
			wantErr: []string{`--webhook-certs (FENCEGATE_WEBHOOK_CERTS): "auto": want self-signed or external`},
		},
		"timeout not shorter than the interval": {
			args: append(slices.Clone(valid), "--declare-timeout", "5s"),
			wantErr: []string{
				"declare timeout 5s is not shorter than the declare interval 5s",
				"--declare-timeout (FENCEGATE_DECLARE_TIMEOUT)", "--declare-interval (FENCEGATE_DECLARE_INTERVAL)",
			},
			notErr: []string{kubeconfigReached},
		},
		"negative durations": {
			args: append(slices.Clone(valid), "--declare-interval", "-1s", "--lease-margin", "-2s"),
			env:  map[string]string{"FENCEGATE_DECLARE_TIMEOUT": "-1s"},
			wantErr: []string{
				"declare interval -1s is negative: set --declare-interval (FENCEGATE_DECLARE_INTERVAL)",
				"declare timeout -1s is negative: set --declare-timeout (FENCEGATE_DECLARE_TIMEOUT)",
				"lease margin -2s is negative: set --lease-margin (FENCEGATE_LEASE_MARGIN)",
			},
			notErr: []string{kubeconfigReached},
		},
		"authority without a port": {
			args:    append(slices.Clone(valid), "--authority", "fence.example.com"),
			wantErr: []string{`--authority "fence.example.com": want host:port`},
		},
		"half a client certificate": {
			args:    append(slices.Clone(valid), "--authority-cert", "tls.crt"),
			wantErr: []string{"a client certificate needs both a certificate file and a key file"},
		},
		"a query rate of 0, which client-go would take for its default of 5": {
			args:    append(slices.Clone(valid), "--kube-api-qps", "0"),
			wantErr: []string{"--kube-api-qps (FENCEGATE_KUBE_API_QPS): 0: want a positive number of queries per second, or a negative one for no client-side limit"},
			notErr:  []string{kubeconfigReached},
		},
		"a query rate that is not a number": {
			env:     map[string]string{"FENCEGATE_KUBE_API_QPS": "NaN"},
			args:    valid,
			wantErr: []string{"--kube-api-qps (FENCEGATE_KUBE_API_QPS): NaN: want a positive number"},
			notErr:  []string{kubeconfigReached},
		},
		"a positive query rate without a burst": {
			args:    append(slices.Clone(valid), "--kube-api-qps", "50", "--kube-api-burst", "0"),
			wantErr: []string{"--kube-api-burst (FENCEGATE_KUBE_API_BURST): 0: want a positive burst with a positive --kube-api-qps"},
			notErr:  []string{kubeconfigReached, "--kube-api-qps (FENCEGATE_KUBE_API_QPS)"},
		},
		"no client-side limit, from the variable, whatever the burst": {
			env:     map[string]string{"FENCEGATE_KUBE_API_QPS": "-1", "FENCEGATE_KUBE_API_BURST": "0"},
			args:    valid,
			wantErr: []string{kubeconfigReached},
			notErr:  []string{"kube-api"},
		},
		"no client-side limit, from the flag": {
			args:    append(slices.Clone(valid), "--kube-api-qps=-1"),
			wantErr: []string{kubeconfigReached},
			notErr:  []string{"kube-api"},
		},
		"valid flags get as far as the kubeconfig": {
			args:    valid,
			wantErr: []string{kubeconfigReached, "/nonexistent/kubeconfig"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, _, err := clitest.Execute(context.Background(), newRootCommand(), append([]string{"run"}, tc.args...)...)
			if err == nil {
				t.Fatal("run started, want an error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			for _, not := range tc.notErr {
				if strings.Contains(err.Error(), not) {
					t.Errorf("error says %q:\n%v", not, err)
				}
			}
		})
	}
}

// manyDomains lists n domains beside the default, comma-separated.
func manyDomains(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("d%d", i)
	}
	return strings.Join(names, ",")
}
