package authoritytest_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

func TestServerKeepsTheFenceAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: time.Minute})
	client := srv.Client(t)

	declared, err := client.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 3})
	if err != nil {
		t.Fatalf("declare: %v", err)
	}
	if got := declared.GetLeaseTtl().AsDuration(); got != time.Minute {
		t.Errorf("lease TTL = %s, want the configured 1m", got)
	}

	srv.Restart(t)
	addr := srv.Addr
	got, err := client.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if h := got.GetFence().GetHolder(); h.GetClusterUid() != "uid-east" || h.GetToken() != declared.GetToken() {
		t.Errorf("holder after restart = %v, want east with token %d", h, declared.GetToken())
	}
	if srv.Addr != addr {
		t.Errorf("address changed across restart: %s, then %s", addr, srv.Addr)
	}

	srv.Stop()
	srv.Stop()
	_, err = client.GetFence(ctx, &fencev1.GetFenceRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("get from a stopped authority: %v, want Unavailable", err)
	}
}
