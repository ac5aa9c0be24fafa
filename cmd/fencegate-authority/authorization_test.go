package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// TestAuthorityCommandAuthorization runs fencegate-authority with mTLS and
// an authorization file: a cluster acts only as itself, an operator's
// release is refused and its revocation recorded with its identity, and a
// broken file leaves the last good one in force, as /readyz says.
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

	oncallTLS, err := ca.ClientConfig(oncall)
	if err != nil {
		t.Fatal(err)
	}
	oncallConn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(credentials.NewTLS(oncallTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = oncallConn.Close() }()
	operator := fencev1.NewFenceServiceClient(oncallConn)
	_, err = operator.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "an operator revokes leases") {
		t.Errorf("the operator releases: %v, want PermissionDenied", err)
	}
	if _, err := operator.RevokeFence(ctx, &fencev1.RevokeFenceRequest{ClusterName: "east"}); err != nil {
		t.Fatalf("the operator revokes: %v", err)
	}
	history, err := operator.GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range history.GetEvents() {
		got = append(got, fmt.Sprintf("%s by %s via %s", ev.GetType(), ev.GetActor().GetIdentity(), ev.GetActor().GetMethod()))
	}
	want := []string{
		"FENCE_HISTORY_EVENT_TYPE_GRANTED by " + eastID + " via /fencegate.fence.v1.FenceService/DeclareClusterEpoch",
		"FENCE_HISTORY_EVENT_TYPE_REVOKED by " + oncallID + " via /fencegate.fence.v1.FenceService/RevokeFence",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
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
