package authority_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/authority/etcdbackend"
)

// embeddedEtcd starts an embedded etcd in a temporary directory for the
// test and returns its client.
func embeddedEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := etcdbackend.StartEmbedded(ctx, etcdbackend.EmbeddedOptions{Dir: t.TempDir(), Logger: testr.NewWithInterface(t, testr.Options{})})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	return e.Client()
}

// serve runs an authority over client on a loopback port until the test
// ends and returns a client of it. Several authorities over one etcd are
// replicas of one authority.
func serve(t testing.TB, client *clientv3.Client, opts authority.Options) fencev1.FenceServiceClient {
	t.Helper()
	return fencev1.NewFenceServiceClient(serveConn(t, client, opts))
}

func serveConn(t testing.TB, client *clientv3.Client, opts authority.Options) *grpc.ClientConn {
	t.Helper()
	if opts.Logger.GetSink() == nil {
		opts.Logger = testr.NewWithInterface(t, testr.Options{})
	}
	svc, err := authority.New(client, opts)
	if err != nil {
		t.Fatalf("new authority: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- authority.NewServer(svc, nil).Serve(ctx, lis) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial the authority: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// errorInfo returns the ErrorInfo of a refusal, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

func declareReq(domain, name string, epoch uint64) *fencev1.DeclareClusterEpochRequest {
	return &fencev1.DeclareClusterEpochRequest{Domain: domain, ClusterName: name, ClusterUid: "uid-" + name, Epoch: epoch}
}

func releaseReq(domain, name string, epoch uint64) *fencev1.ReleaseFenceRequest {
	return &fencev1.ReleaseFenceRequest{Domain: domain, ClusterUid: "uid-" + name, Epoch: epoch}
}

// metricValue sums the counters and gauges of the metric family name whose
// label has value.
func metricValue(reg *prometheus.Registry, name, label, value string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum, nil
}
