// Command demo is what `make run` runs: a fence authority with embedded etcd,
// served with mTLS and an authorization file, and two real control planes,
// "east" and "west", each served by `fencegate run` with a client
// certificate of its own identity and serving two fence domains, and
// holding a CronJob and a Flux Kustomization (under Flux's real CRD) while
// its cluster does not hold the fence; then a
// failover and a failback by `fencegate failover`, and the two domains held
// by opposite clusters, one failing over while the other's holder keeps
// writing, walked through step by step. Every step checks its outcome. The stack stays up for trying things by hand until Ctrl-C, or
// exits after the walkthrough with --exit (FENCEGATE_DEMO_EXIT=1).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/test/pinned"
	"github.com/fencegate/fencegate/test/stack"
)

func main() {
	os.Exit(mainCode())
}

func mainCode() int {
	bin := flag.String("fencegate", "bin/fencegate", "path of the fencegate binary")
	exit := flag.Bool("exit", os.Getenv("FENCEGATE_DEMO_EXIT") != "", "exit after the walkthrough instead of keeping the stack up [$FENCEGATE_DEMO_EXIT]")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin, *exit, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "\nmake run failed:", err)
		return 1
	}
	return 0
}

// run starts the stack, walks through the failover and, unless exit is set,
// keeps the stack up until ctx ends. It always stops everything it started.
func run(ctx context.Context, bin string, exit bool, out io.Writer) (err error) {
	bin, err = filepath.Abs(bin)
	if err != nil {
		return fmt.Errorf("fencegate binary: %w", err)
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("fencegate binary: %w (make build makes it)", err)
	}
	dir, err := os.MkdirTemp("", "fencegate-demo-")
	if err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	say := func(format string, args ...any) { fmt.Fprintf(out, "  "+format+"\n", args...) }

	// Flux's real CRDs, from the module cache at the versions
	// hack/tools/flux pins: the walkthrough holds a Kustomization.
	fluxCRDs, err := pinned.FluxCRDs(ctx)
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("the CRDs of the pinned Flux modules: %w", err)
	}

	fmt.Fprintln(out, "fencegate: two clusters, one ownership fence")
	fmt.Fprintln(out, "Setting up: a fence authority (mTLS, an authorization file) and two real Kubernetes control planes on this machine.")
	s, err := stack.Start(ctx, stack.Options{
		Binary:   bin,
		Dir:      dir,
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1}, {Name: "west", Epoch: 1}},
		Domains:  []string{paymentsDomain},
		MTLS:     true,
		CRDs:     fluxCRDs,
		// A second of quiet counts: the demo's CronJob runs nothing, and
		// no Flux controller runs to reconcile its Kustomization.
		HoldKinds:    holdKinds,
		HoldQuietFor: time.Second,
		Say:          say,
	})
	defer func() {
		fmt.Fprintln(out, "\nStopping everything …")
		if stopErr := s.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stop: %w", stopErr))
		}
		if err != nil {
			fmt.Fprintf(out, "The logs of every process stay in %s.\n", dir)
			return
		}
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = fmt.Errorf("remove the work directory: %w", rmErr)
		}
	}()
	if err != nil {
		return err
	}

	w := &walkthrough{s: s, out: out}
	if err := w.run(ctx); err != nil {
		return fmt.Errorf("step %d: %w", w.step, err)
	}
	fmt.Fprintln(out, "\nEvery step behaved as fencegate promises.")
	if exit {
		return nil
	}
	printTryByHand(out, s)
	<-ctx.Done()
	return nil
}

func printTryByHand(out io.Writer, s *stack.Stack) {
	fmt.Fprintf(out, `
The stack stays up. Try it by hand (Ctrl-C stops everything):

  cd %[1]s
  export PATH=%[2]s:$PATH KUBECONFIG=$PWD/kubeconfig    # the kubectl the tests use; contexts east and west
  kubectl --context east get fences -o wide        # east holds the fence
  kubectl --context west get fences -o wide        # west is fenced
  kubectl --context west get components -A
  %[3]s failover --to west --from east --wait
  %[3]s fence status  --authority %[4]s --authority-ca pki/ca.crt --authority-cert pki/operator.crt --authority-key pki/operator.key
  %[3]s fence history --authority %[4]s --authority-ca pki/ca.crt --authority-cert pki/operator.crt --authority-key pki/operator.key

pki/ holds the CA, the authority's certificate, each cluster's client
certificate (%[5]s, …), the operator's (%[6]s)
and the authorization file. Logs of every process are in %[1]s.
`, s.Dir, s.Cluster("east").ControlPlane.Assets, s.Binary, s.AuthorityAddr, stack.ClusterIdentity("east"), stack.OperatorIdentity)
}
