package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/internal/cli/clitest"
	"github.com/fencegate/fencegate/internal/testcerts"
)

// tlsAuthority starts an authority that serves mTLS with a certificate for
// authority.test and 127.0.0.1, and authorizes by the given file if any.
// It returns the authority, its CA and the CA's file in dir.
func tlsAuthority(t *testing.T, dir, authorizationFile string) (*authoritytest.Server, *testcerts.CA, string) {
	t.Helper()
	ca, err := testcerts.NewCA("authority-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("authority.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.MutualTLS(server)
	if err != nil {
		t.Fatal(err)
	}
	srv := authoritytest.Start(t, authoritytest.Options{TLS: serving, AuthorizationFile: authorizationFile, Quiet: true})
	return srv, ca, caFile
}

// TestFenceCommandsOverMutualTLS reaches an mTLS authority with the
// commands' --authority-* flags: the CA, the client certificate and the
// server name must all be right.
func TestFenceCommandsOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	srv, ca, caFile := tlsAuthority(t, dir, "")
	client, err := ca.Client("east")
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey, err := client.WriteFiles(dir, "client")
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		args    []string
		wantErr bool
	}{
		"client certificate":      {args: []string{"--authority-ca", caFile, "--authority-cert", clientCert, "--authority-key", clientKey}},
		"checked server name":     {args: []string{"--authority-ca", caFile, "--authority-cert", clientCert, "--authority-key", clientKey, "--authority-server-name", "authority.test"}},
		"wrong server name":       {args: []string{"--authority-ca", caFile, "--authority-cert", clientCert, "--authority-key", clientKey, "--authority-server-name", "other.test"}, wantErr: true},
		"no client certificate":   {args: []string{"--authority-ca", caFile}, wantErr: true},
		"untrusted server":        {args: []string{"--authority-cert", clientCert, "--authority-key", clientKey}, wantErr: true},
		"plaintext to TLS server": {args: []string{"--authority-insecure"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, _, err := clitest.Execute(ctx, newRootCommand(), append([]string{"fence", "status", "--authority", srv.Addr, "--timeout", "5s"}, tc.args...)...)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("status succeeded:\n%s", out)
				}
				t.Logf("refused as expected: %v", err)
				return
			}
			if err != nil || !strings.HasPrefix(out, "Domain:") {
				t.Fatalf("status: %v\n%s", err, out)
			}
		})
	}
}

// TestOperatorCommandsReadTheirOwnVariables runs the operator's fence
// commands with their certificate from FENCEGATE_FENCE_* against an
// authority that authorizes by role, in an environment that also holds a
// fencegate pod's variables: the commands never act with the pod's epoch
// or cluster UID, an operator's release is refused, and its revocation is
// recorded with its identity.
func TestOperatorCommandsReadTheirOwnVariables(t *testing.T) {
	const (
		eastID   = "spiffe://fencegate.test/cluster/east"
		oncallID = "spiffe://fencegate.test/operator/oncall"
	)
	dir := t.TempDir()
	file := filepath.Join(dir, "authorization.yaml")
	if err := os.WriteFile(file, []byte("clusters:\n  - {identity: "+eastID+", cluster: east, domains: [\"*\"]}\noperators: ["+oncallID+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, ca, caFile := tlsAuthority(t, dir, file)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eastTLS, err := ca.ClientTLS(eastID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ClientTLS(t, eastTLS).DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1}); err != nil {
		t.Fatalf("east declares as east: %v", err)
	}
	oncall, err := ca.ClientFor(oncallID)
	if err != nil {
		t.Fatal(err)
	}
	oncallCert, oncallKey, err := oncall.WriteFiles(dir, "oncall")
	if err != nil {
		t.Fatal(err)
	}

	for k, v := range map[string]string{
		"FENCEGATE_FENCE_AUTHORITY": srv.Addr, "FENCEGATE_FENCE_AUTHORITY_CA": caFile,
		"FENCEGATE_FENCE_AUTHORITY_CERT": oncallCert, "FENCEGATE_FENCE_AUTHORITY_KEY": oncallKey,
		"FENCEGATE_EPOCH": "1", "FENCEGATE_CLUSTER_UID": "uid-east", "FENCEGATE_INSTANCE": "",
	} {
		t.Setenv(k, v)
	}
	_, _, err = clitest.Execute(ctx, newRootCommand(), "fence", "release", "--cluster", "east")
	if err == nil || !strings.Contains(err.Error(), "--cluster, --cluster-uid and --epoch name the holder that releases") {
		t.Errorf("fence release took the pod's variables: %v", err)
	}
	_, _, err = clitest.Execute(ctx, newRootCommand(), "fence", "release", "--cluster", "east", "--cluster-uid", "uid-east", "--epoch", "1")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "an operator revokes leases") {
		t.Errorf("the operator releases: %v, want PermissionDenied", err)
	}
	out, _, err := clitest.Execute(ctx, newRootCommand(), "fence", "revoke", "--cluster", "east")
	if err != nil || !strings.Contains(out, "Revoked every lease of east") {
		t.Fatalf("the operator revokes: %v\n%s", err, out)
	}
	out, _, err = clitest.Execute(ctx, newRootCommand(), "fence", "history")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"granted", eastID + " via DeclareClusterEpoch", "revoked", oncallID + " via RevokeFence"} {
		if !strings.Contains(out, want) {
			t.Errorf("fence history does not show %q:\n%s", want, out)
		}
	}
}
