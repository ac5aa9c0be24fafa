// Command demo is what `make run` runs: a fence authority with embedded etcd
// and two real control planes, "east" and "west", each served by
// `fencegate run`, then a failover walked through step by step. Every step
// checks its outcome. The stack stays up for trying things by hand until
// Ctrl-C, or exits after the walkthrough with --exit (FENCEGATE_DEMO_EXIT=1).
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

	fmt.Fprintln(out, "fencegate: two clusters, one ownership fence")
	fmt.Fprintln(out, "Setting up: a fence authority and two real Kubernetes control planes on this machine.")
	s, err := stack.Start(ctx, stack.Options{
		Binary:   bin,
		Dir:      dir,
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1}, {Name: "west", Epoch: 1}},
		Say:      say,
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
	east, west := s.Cluster("east"), s.Cluster("west")
	fmt.Fprintf(out, `
The stack stays up. Try it by hand (Ctrl-C stops everything):

  export PATH=%[6]s:$PATH    # the kubectl the tests use
  kubectl --kubeconfig %[1]s get components -A        # east: fenced now
  kubectl --kubeconfig %[2]s get components -A        # west: holds the fence
  kubectl --kubeconfig %[1]s apply --dry-run=server -f - <<<'{"apiVersion":"components.fencegate.dev/v1alpha1","kind":"Component","metadata":{"name":"x","namespace":"default"}}'
  %[3]s fence status --authority %[4]s
  %[3]s fence watch  --authority %[4]s

Logs of every process are in %[5]s.
`, east.ControlPlane.Kubeconfig, west.ControlPlane.Kubeconfig, s.Binary, s.AuthorityAddr, s.Dir, east.ControlPlane.Assets)
}
