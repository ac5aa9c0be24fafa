package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/test/cluster"
)

// stack is everything the demo runs: one fence authority and, per cluster, a
// control plane and its `fencegate run`.
type stack struct {
	bin, dir      string
	authorityAddr string
	authority     *process
	fence         fencev1.FenceServiceClient
	conn          *grpc.ClientConn
	clusters      []*node
}

// node is one cluster: a real control plane and the fencegate serving it.
type node struct {
	name     string
	epoch    uint64
	cp       *cluster.ControlPlane
	webhooks *envtest.WebhookInstallOptions
	run        *process
	health     string
	kubeconfig string
}

// controllerUser is who fencegate acts as in each cluster.
const controllerUser = "system:serviceaccount:fencegate-system:fencegate"

// configFile is data.fencegate.config for the demo: the shipped defaults,
// with fencegate's own user allowed to write Component status.
const configFile = `enforcement: deny
controller_users:
  - ` + controllerUser + `
`

func (s *stack) cluster(name string) *node {
	for _, n := range s.clusters {
		if n.name == name {
			return n
		}
	}
	panic("no cluster " + name)
}

// startStack starts the authority and the clusters, each cluster at its
// epoch, and waits until every fencegate is ready.
func startStack(ctx context.Context, bin, dir string, epochs map[string]uint64, names []string, say func(string, ...any)) (*stack, error) {
	s := &stack{bin: bin, dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(configFile), 0o600); err != nil {
		return s, fmt.Errorf("write fencegate config: %w", err)
	}
	metrics, err := freeAddress()
	if err != nil {
		return s, err
	}
	if s.authorityAddr, err = freeAddress(); err != nil {
		return s, err
	}
	say("starting the fence authority on %s (embedded etcd in %s)", s.authorityAddr, filepath.Join(dir, "authority-data"))
	s.authority, err = startProcess(bin, dir, "authority", "authority",
		"--listen", s.authorityAddr,
		"--data-dir", filepath.Join(dir, "authority-data"),
		"--metrics-address", metrics,
		"--log-format", "console")
	if err != nil {
		return s, err
	}
	if err := s.authority.waitHealthy(ctx, "http://"+metrics+"/readyz"); err != nil {
		return s, err
	}
	s.conn, err = grpc.NewClient(s.authorityAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return s, fmt.Errorf("connect to the authority: %w", err)
	}
	s.fence = fencev1.NewFenceServiceClient(s.conn)

	for _, name := range names {
		say("starting control plane %q (kube-apiserver + etcd)", name)
		webhooks := cluster.ComponentWebhooks()
		cp, err := cluster.Start(cluster.Options{Name: name, Webhooks: webhooks})
		if err != nil {
			return s, err
		}
		n := &node{name: name, epoch: epochs[name], cp: cp, webhooks: webhooks}
		s.clusters = append(s.clusters, n)
		// fencegate runs as its own user, the way the chart runs it as its
		// service account: only that user may write Component status on a
		// fenced cluster.
		if n.kubeconfig, _, err = cp.AddUser(controllerUser, "system:masters"); err != nil {
			return s, err
		}
		if err := s.startFencegate(ctx, n, say); err != nil {
			return s, err
		}
	}
	return s, nil
}

// startFencegate runs `fencegate run` for a cluster at its epoch, as a
// rollout of the Deployment would, and waits until it is ready.
func (s *stack) startFencegate(ctx context.Context, n *node, say func(string, ...any)) error {
	metrics, err := freeAddress()
	if err != nil {
		return err
	}
	if n.health, err = freeAddress(); err != nil {
		return err
	}
	webhook := net.JoinHostPort(n.webhooks.LocalServingHost, strconv.Itoa(n.webhooks.LocalServingPort))
	say("starting fencegate run for %q at epoch %d (webhook on %s)", n.name, n.epoch, webhook)
	n.run, err = startProcess(s.bin, s.dir, fmt.Sprintf("%s-epoch%d", n.name, n.epoch), "run",
		"--cluster-name", n.name,
		"--epoch", strconv.FormatUint(n.epoch, 10),
		"--authority", s.authorityAddr,
		"--kubeconfig", n.kubeconfig,
		"--config-file", filepath.Join(s.dir, "config.yaml"),
		"--webhook-address", webhook,
		"--webhook-cert-dir", n.webhooks.LocalServingCertDir,
		"--webhook-certs", "external",
		"--metrics-address", metrics,
		"--health-address", n.health,
		"--log-format", "console")
	if err != nil {
		return err
	}
	return n.run.waitHealthy(ctx, "http://"+n.health+"/readyz")
}

// restartWithEpoch rolls a cluster's fencegate to a new epoch.
func (s *stack) restartWithEpoch(ctx context.Context, n *node, epoch uint64, say func(string, ...any)) error {
	if err := n.run.stop(30 * time.Second); err != nil {
		return err
	}
	n.epoch = epoch
	return s.startFencegate(ctx, n, say)
}

// stop stops every process and control plane and removes the work directory.
func (s *stack) stop() error {
	var errs []error
	for _, n := range s.clusters {
		if n.run != nil {
			errs = append(errs, n.run.stop(30*time.Second))
		}
		errs = append(errs, n.cp.Stop())
	}
	if s.conn != nil {
		errs = append(errs, s.conn.Close())
	}
	if s.authority != nil {
		errs = append(errs, s.authority.stop(30*time.Second))
	}
	errs = append(errs, os.RemoveAll(s.dir))
	return errors.Join(errs...)
}
