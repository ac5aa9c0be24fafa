package fenceagent_test

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/tlsutil"
)

// This is how a cluster's fencegate wires its agent: resolve the cluster's
// identity, dial the authority over mTLS, and run the agent until ctx ends,
// re-reading data.fence on every transition.
func Example() {
	var (
		ctx      context.Context       // the process's context
		kube     client.Reader         // an uncached Kubernetes reader
		store    fencestate.Writer     // the policy engine's store
		log      logr.Logger           // the process's logger
		registry prometheus.Registerer // the metrics registry
	)
	uid, err := fenceagent.ResolveClusterUID(ctx, kube, "" /* --cluster-uid */)
	if err != nil {
		panic(err)
	}
	tlsConfig, err := tlsutil.Client(tlsutil.ClientFiles{CAFile: "ca.crt", CertFile: "tls.crt", KeyFile: "tls.key"})
	if err != nil {
		panic(err)
	}
	conn, err := fenceagent.Dial("fence-authority.example.com:9443", tlsConfig)
	if err != nil {
		panic(err)
	}
	defer func() { _ = conn.Close() }()
	agent, err := fenceagent.New(fenceagent.Options{
		Client:      fencev1.NewFenceServiceClient(conn),
		Writer:      store,
		ClusterName: "east",
		ClusterUID:  uid,
		Epoch:       7,
		Logger:      log,
		Registerer:  registry,
	})
	if err != nil {
		panic(err)
	}
	changes := agent.Subscribe()
	go func() {
		for range changes {
			fmt.Println("fence status:", agent.Status().Status)
		}
	}()
	if err := agent.Start(ctx); err != nil {
		panic(err)
	}
}
