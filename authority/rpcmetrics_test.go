package authority_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/authority/authz"
)

// serveWithRPCMetrics runs an authority over client with its RPC metrics
// on reg and guard, until the test ends, and returns a client of it.
func serveWithRPCMetrics(t *testing.T, client *clientv3.Client, reg *prometheus.Registry, guard *authz.Guard) fencev1.FenceServiceClient {
	t.Helper()
	svc, err := authority.New(client, authority.Options{Registerer: reg, Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := authority.NewRPCMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- authority.NewServer(svc, guard, rpc.ServerOptions()...).Serve(ctx, lis) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return fencev1.NewFenceServiceClient(conn)
}

func TestRPCMetrics(t *testing.T) {
	etcd := embeddedEtcd(t)
	open := prometheus.NewRegistry()
	// Every method and code is exported before the first call.
	client := serveWithRPCMetrics(t, etcd, open, nil)
	before, err := testutil.GatherAndCount(open, "fencegate_authority_grpc_server_handled_total")
	if err != nil {
		t.Fatal(err)
	}
	if want := len(fencev1.FenceService_ServiceDesc.Methods) + len(fencev1.FenceService_ServiceDesc.Streams); before != want*17 {
		t.Errorf("%d handled series before any call, want %d methods × 17 codes", before, want)
	}
	// A replica whose authorization file names no one: it refuses every
	// plaintext call, which has no identity.
	guarded := prometheus.NewRegistry()
	nobody, err := authz.Parse([]byte("clusters: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	guard, err := authz.NewGuard(authz.GuardOptions{Policy: func() *authz.Policy { return nobody }, Logger: testr.New(t), Registerer: guarded})
	if err != nil {
		t.Fatal(err)
	}
	refusing := serveWithRPCMetrics(t, etcd, guarded, guard)

	call, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = client.DeclareClusterEpoch(call, declareReq("", "east", 1)) // OK
	_, _ = client.DeclareClusterEpoch(call, declareReq("", "east", 1)) // OK
	_, _ = client.DeclareClusterEpoch(call, declareReq("", "west", 1)) // FailedPrecondition
	_, _ = client.DeclareClusterEpoch(call, declareReq("", "", 1))     // InvalidArgument
	_, _ = client.GetFence(call, &fencev1.GetFenceRequest{Domain: "Not A Domain"})
	watch, err := client.WatchFence(call, &fencev1.WatchFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("watch snapshot: %v", err)
	}
	if _, err := refusing.DeclareClusterEpoch(call, declareReq("", "east", 1)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the guarded replica answered %v, want PermissionDenied", err)
	}

	tests := map[string]struct {
		reg          *prometheus.Registry
		method, code string
		want         float64
	}{
		"declarations granted and renewed":       {open, "DeclareClusterEpoch", "OK", 2},
		"declaration refused":                    {open, "DeclareClusterEpoch", "FailedPrecondition", 1},
		"declaration invalid":                    {open, "DeclareClusterEpoch", "InvalidArgument", 1},
		"get of a bad domain":                    {open, "GetFence", "InvalidArgument", 1},
		"no release made":                        {open, "ReleaseFence", "OK", 0},
		"the watch has not ended":                {open, "WatchFence", "OK", 0},
		"the guard's refusal, counted before it": {guarded, "DeclareClusterEpoch", "PermissionDenied", 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := rpcsHandled(t, tc.reg, tc.method, tc.code); got != tc.want {
				t.Errorf("handled{%s, %s} = %v, want %v", tc.method, tc.code, got, tc.want)
			}
		})
	}
	if n, err := testutil.GatherAndCount(open, "fencegate_authority_grpc_server_handling_seconds"); err != nil || n == 0 {
		t.Errorf("no RPC latency recorded: %d series, %v", n, err)
	}
	if n, err := testutil.GatherAndCount(open, "fencegate_authority_grpc_server_msg_sent_total"); err != nil || n == 0 {
		t.Errorf("no stream messages counted: %d series, %v", n, err)
	}
}

// rpcsHandled counts the FenceService calls of a method that ended with a
// code.
func rpcsHandled(t *testing.T, reg *prometheus.Registry, method, code string) float64 {
	t.Helper()
	want := map[string]string{"grpc_service": fencev1.FenceService_ServiceDesc.ServiceName, "grpc_method": method, "grpc_code": code}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != "fencegate_authority_grpc_server_handled_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			matched := 0
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
					matched++
				}
			}
			if matched == len(want) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
