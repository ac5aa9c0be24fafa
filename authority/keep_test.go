package authority_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
)

// TestHolderKeepsItsLease: through the real service on etcd, a holder's
// declaration that asks for its running lease to be kept is answered with
// that lease, its declaration and the length it was granted for, and
// writes nothing to etcd; one that names another declaration's lease gets
// a new lease of its own, written.
func TestHolderKeepsItsLease(t *testing.T) {
	etcd := embeddedEtcd(t)
	fence := serve(t, etcd, authority.Options{LeaseTTL: 15 * time.Second})
	// A replica restarted with a longer --lease-ttl, over the same etcd.
	longer := serve(t, etcd, authority.Options{LeaseTTL: 30 * time.Second})
	ctx := context.Background()
	revision := func() int64 {
		t.Helper()
		resp, err := etcd.Get(ctx, "revision", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	declare := func(client fencev1.FenceServiceClient, id, keep uint64) *fencev1.DeclareClusterEpochResponse {
		t.Helper()
		req := declareReq("", "east", 1)
		req.DeclarationId, req.KeepLeaseOf = id, keep
		resp, err := client.DeclareClusterEpoch(ctx, req)
		if err != nil {
			t.Fatalf("declaration %d keeping %d: %v", id, keep, err)
		}
		return resp
	}

	tests := []struct {
		name       string
		client     fencev1.FenceServiceClient
		id, keep   uint64
		wantLease  uint64
		wantTTL    time.Duration
		wantWrites bool
	}{
		{name: "the grant", client: fence, id: 11, wantLease: 11, wantTTL: 15 * time.Second, wantWrites: true},
		{name: "keeping it", client: fence, id: 12, keep: 11, wantLease: 11, wantTTL: 15 * time.Second},
		{name: "keeping it again", client: fence, id: 13, keep: 11, wantLease: 11, wantTTL: 15 * time.Second},
		{name: "keeping another declaration's lease", client: fence, id: 14, keep: 12, wantLease: 14, wantTTL: 15 * time.Second, wantWrites: true},
		{name: "keeping it at a replica with a longer TTL", client: longer, id: 15, keep: 14, wantLease: 14, wantTTL: 15 * time.Second},
		{name: "a renewal at that replica", client: longer, id: 16, wantLease: 16, wantTTL: 30 * time.Second, wantWrites: true},
	}
	for _, tc := range tests {
		before := revision()
		resp := declare(tc.client, tc.id, tc.keep)
		if got := resp.GetLeaseDeclarationId(); got != tc.wantLease {
			t.Errorf("%s: lease of declaration %d, want %d", tc.name, got, tc.wantLease)
		}
		if got := resp.GetLeaseTtl().AsDuration(); got != tc.wantTTL {
			t.Errorf("%s: lease TTL %v, want %v", tc.name, got, tc.wantTTL)
		}
		if wrote := revision() != before; wrote != tc.wantWrites {
			t.Errorf("%s: wrote to etcd %v, want %v", tc.name, wrote, tc.wantWrites)
		}
	}
}
