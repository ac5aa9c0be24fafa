// Command bench measures fencegate's admission webhook side by side with
// OPA's own server (package sidebyside); see README.md.
//
//	go -C test/bench run . -o "$PWD/reports"
//
// test/bench is a module of its own, so that what only it needs (vegeta,
// gonum's plot) stays out of the root module's go.mod.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/fencegate/fencegate/test/bench/sidebyside"
)

// generatorMemoryLimit is the heap size at which the load generator
// collects garbage.
const generatorMemoryLimit = 1 << 30

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx)
	stop()
	os.Exit(code)
}

func run(ctx context.Context) int {
	if served, code := sidebyside.ServeFloorCommand(ctx, os.Args[1:]); served {
		return code
	}
	var o sidebyside.Options
	o.AddFlags(flag.CommandLine)
	flag.Parse()
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	// The load generator allocates for every request. Collecting only when
	// the heap reaches a limit (a few times a minute at most, a few MiB
	// live) keeps the collector's pauses out of the latencies it measures
	// and leaves the shared cores to the servers.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(generatorMemoryLimit)
	if err := sidebyside.Run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}
