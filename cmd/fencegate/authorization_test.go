package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// TestAuthorityCommandAuthorization runs `fencegate authority` with mTLS and
// an authorization file, and the operator's `fencegate fence` commands
// with their own certificate from their own variables: a cluster acts only
// as itself, an operator's release is refused and its revocation recorded
// with its identity, and a broken file leaves the last good one in force,
// as /readyz says.
func TestAuthorityCommandAuthorization(t *testing.T) {
	const (
		eastID   = "spiffe://fencegate.test/cluster/east"
		oncallID = "spiffe://fencegate.test/operator/oncall"
	)
	dir := t.TempDir()
	ca, caFile, serverCert, serverKey := authorityTLSFiles(t, dir)
	oncall, err := ca.ClientFor(oncallID)
	if err != nil {
		t.Fatal(err)
	}
	oncallCert, oncallKey, err := oncall.WriteFiles(dir, "oncall")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "authorization.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(file+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write("clusters:\n  - {identity: " + eastID + ", cluster: east, domains: [\"*\"]}\noperators: [" + oncallID + "]\n")

	listen, metrics := freeAddress(t), freeAddress(t)
	startAuthorityCommand(t, metrics, "--listen", listen, "--data-dir", filepath.Join(dir, "data"),
		"--tls-cert", serverCert, "--tls-key", serverKey, "--client-ca", caFile, "--authorization-file", file)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	eastTLS, err := ca.ClientTLS(eastID)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(credentials.NewTLS(eastTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	east := fencev1.NewFenceServiceClient(conn)
	if _, err := east.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1}); err != nil {
		t.Fatalf("east declares as east: %v", err)
	}
	_, err = east.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "west", ClusterUid: "uid-west", Epoch: 2})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "may act only as cluster east; this call declares west") {
		t.Fatalf("east declares as west: %v, want PermissionDenied", err)
	}

	// The operator's commands read FENCEGATE_FENCE_*, and never a pod's
	// FENCEGATE_EPOCH or FENCEGATE_CLUSTER_UID.
	for k, v := range map[string]string{
		"FENCEGATE_FENCE_AUTHORITY": listen, "FENCEGATE_FENCE_AUTHORITY_CA": caFile,
		"FENCEGATE_FENCE_AUTHORITY_CERT": oncallCert, "FENCEGATE_FENCE_AUTHORITY_KEY": oncallKey,
		"FENCEGATE_EPOCH": "1", "FENCEGATE_CLUSTER_UID": "uid-east", "FENCEGATE_INSTANCE": "",
	} {
		t.Setenv(k, v)
	}
	_, _, err = runRoot(ctx, "fence", "release", "--cluster", "east")
	if err == nil || !strings.Contains(err.Error(), "--cluster, --cluster-uid and --epoch name the holder that releases") {
		t.Errorf("fence release took the pod's variables: %v", err)
	}
	_, _, err = runRoot(ctx, "fence", "release", "--cluster", "east", "--cluster-uid", "uid-east", "--epoch", "1")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "an operator revokes leases") {
		t.Errorf("the operator releases: %v, want PermissionDenied", err)
	}
	out, _, err := runRoot(ctx, "fence", "revoke", "--cluster", "east")
	if err != nil || !strings.Contains(out, "Revoked every lease of east") {
		t.Fatalf("the operator revokes: %v\n%s", err, out)
	}
	out, _, err = runRoot(ctx, "fence", "history")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"granted", eastID + " via DeclareClusterEpoch", "revoked", oncallID + " via RevokeFence"} {
		if !strings.Contains(out, want) {
			t.Errorf("fence history does not show %q:\n%s", want, out)
		}
	}

	readyz := func() string {
		code, body := httpGet("http://" + metrics + "/readyz")
		if code != http.StatusOK {
			t.Fatalf("/readyz answers %d: %s", code, body)
		}
		return body
	}
	if body := readyz(); !strings.Contains(body, "authorization: "+file+" revision ") || strings.Contains(body, "failed") {
		t.Errorf("/readyz = %q, want the revision in force", body)
	}
	write("clusters: [")
	deadline := time.Now().Add(20 * time.Second)
	for body := readyz(); !strings.Contains(body, "failed, so that revision stays in force"); body = readyz() {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz does not say the reload failed: %q", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := east.GetFence(ctx, &fencev1.GetFenceRequest{}); err != nil {
		t.Errorf("east reads after a broken file: %v; the last good one must stay in force", err)
	}
}
