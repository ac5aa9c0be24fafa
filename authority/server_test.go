package authority_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
)

func TestHealthAndReflection(t *testing.T) {
	conn := serveConn(t, embeddedEtcd(t), authority.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	health := healthpb.NewHealthClient(conn)
	for _, service := range []string{"", fencev1.FenceService_ServiceDesc.ServiceName} {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, %v; want SERVING", service, resp.GetStatus(), err)
		}
	}

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatalf("reflection request: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection answer: %v", err)
	}
	var services []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	for _, want := range []string{fencev1.FenceService_ServiceDesc.ServiceName, "grpc.health.v1.Health"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, want %s among them", services, want)
		}
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	client := serve(t, embeddedEtcd(t), authority.Options{Registerer: reg, LeaseTTL: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, req := range []*fencev1.DeclareClusterEpochRequest{
		declareReq("", "east", 2),   // ok: first grant
		declareReq("", "east", 2),   // ok: renewal
		declareReq("", "west", 2),   // fenced
		declareReq("", "west", 3),   // acquiring
		declareReq("", "west", 1),   // regressed
		declareReq("", "", 1),       // invalid
		declareReq("b", "north", 1), // ok: first grant in domain b
	} {
		_, _ = client.DeclareClusterEpoch(ctx, req)
	}
	_, _ = client.ReleaseFence(ctx, releaseReq("", "east", 2))
	_, _ = client.ReleaseFence(ctx, releaseReq("", "west", 3))
	if _, err := client.DeclareClusterEpoch(ctx, declareReq("", "west", 3)); err != nil {
		t.Fatalf("west takes over: %v", err)
	}

	want := `
# HELP fencegate_authority_declarations_total DeclareClusterEpoch calls by result: ok, fenced, epoch_regressed, acquiring, invalid, limited (too many instances of the holder) or error.
# TYPE fencegate_authority_declarations_total counter
fencegate_authority_declarations_total{result="acquiring"} 1
fencegate_authority_declarations_total{result="fenced"} 1
fencegate_authority_declarations_total{result="invalid"} 1
fencegate_authority_declarations_total{result="ok"} 4
fencegate_authority_declarations_total{result="epoch_regressed"} 1
# HELP fencegate_authority_grants_total Fences granted, by domain and kind: first, after_release or after_expiry (the previous holder stopped renewing).
# TYPE fencegate_authority_grants_total counter
fencegate_authority_grants_total{domain="b",kind="first"} 1
fencegate_authority_grants_total{domain="default",kind="after_release"} 1
fencegate_authority_grants_total{domain="default",kind="first"} 1
# HELP fencegate_authority_releases_total ReleaseFence calls by result: released, already_released, no_lease, not_holder, epoch_regressed, invalid or error.
# TYPE fencegate_authority_releases_total counter
fencegate_authority_releases_total{result="not_holder"} 1
fencegate_authority_releases_total{result="released"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fencegate_authority_declarations_total", "fencegate_authority_grants_total", "fencegate_authority_releases_total"); err != nil {
		t.Error(err)
	}
	fence, err := client.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got, err := metricValue(reg, "fencegate_authority_fence_token", "domain", "default"); err != nil || got != float64(fence.GetFence().GetHolder().GetToken()) {
		t.Errorf("token gauge of domain default = %v (%v), want %d", got, err, fence.GetFence().GetHolder().GetToken())
	}
	if n, err := testutil.GatherAndCount(reg, "fencegate_authority_store_transaction_duration_seconds"); err != nil || n == 0 {
		t.Errorf("no store transaction latency recorded: %d series, %v", n, err)
	}
}
