package authority

import (
	"fmt"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// rpcMetricsNamespace prefixes the gRPC server metrics, so that they read
// fencegate_authority_grpc_server_handled_total and so on.
const rpcMetricsNamespace = "fencegate_authority"

// RPCMetrics count and time every RPC the authority serves, by service,
// method and gRPC code: fencegate_authority_grpc_server_started_total,
// _handled_total, _msg_received_total, _msg_sent_total and the
// _handling_seconds histogram. They see each call as its client does,
// refusals of any interceptor included, when their interceptors come first
// in the chain.
type RPCMetrics struct {
	server *grpcprom.ServerMetrics
}

// NewRPCMetrics registers the RPC metrics on reg. Every FenceService method
// is exported from the start, with a zero for each code, so that rates and
// alerts see zeros rather than no series.
func NewRPCMetrics(reg prometheus.Registerer) (*RPCMetrics, error) {
	m := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace(rpcMetricsNamespace)),
		grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramNamespace(rpcMetricsNamespace),
			// A declaration is one etcd transaction: a millisecond or
			// two, seconds while etcd elects a leader.
			grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.0005, 2, 14)),
		),
	)
	m.InitializeMetrics(fenceServiceInfo{})
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("register authority RPC metrics: %w", err)
	}
	return &RPCMetrics{server: m}, nil
}

// ServerOptions returns the interceptors that record the metrics, for
// NewServer; put them before any other interceptor.
func (m *RPCMetrics) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.server.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.server.StreamServerInterceptor()),
	}
}

// fenceServiceInfo describes the FenceService's methods the way a
// grpc.Server does once the service is registered, so the metrics can be
// initialized before the server exists.
type fenceServiceInfo struct{}

func (fenceServiceInfo) GetServiceInfo() map[string]grpc.ServiceInfo {
	desc := fencev1.FenceService_ServiceDesc
	var methods []grpc.MethodInfo
	for _, m := range desc.Methods {
		methods = append(methods, grpc.MethodInfo{Name: m.MethodName})
	}
	for _, s := range desc.Streams {
		methods = append(methods, grpc.MethodInfo{Name: s.StreamName, IsClientStream: s.ClientStreams, IsServerStream: s.ServerStreams})
	}
	return map[string]grpc.ServiceInfo{desc.ServiceName: {Methods: methods}}
}
