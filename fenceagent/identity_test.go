package fenceagent

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/test/cluster"
)

func TestResolveClusterUID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "east", NoCRDs: true})
	want, err := cp.KubeSystemUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A service account without RBAC on kube-system, through impersonation.
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:fencegate:fencegate"}
	forbidden, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		reader   client.Reader
		override string
		want     string
		// wantErr lists what the error must name.
		wantErr []string
	}{
		"the kube-system Namespace UID": {reader: cp.Client, want: want},
		"the override wins":             {reader: cp.Client, override: "restored-cluster-uid", want: "restored-cluster-uid"},
		"the override needs no API":     {override: " 1234-abcd ", want: "1234-abcd"},
		"RBAC forbids reading kube-system": {
			reader:  forbidden,
			wantErr: []string{"forbidden", `"get" on namespaces/kube-system`, "--cluster-uid", "FENCEGATE_CLUSTER_UID"},
		},
		"no client and no override": {
			wantErr: []string{`"get" on namespaces/kube-system`, "--cluster-uid", "FENCEGATE_CLUSTER_UID"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ResolveClusterUID(ctx, tc.reader, tc.override)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("got UID %q, want an error", got)
				}
				for _, part := range tc.wantErr {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q does not name %q", err, part)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("UID = %q, want %q", got, tc.want)
			}
		})
	}
}
