package sidebyside

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencegate/fencegate/fencestate"
)

// OPA's paths for the two webhooks (see system.rego).
const (
	opaValidatePath = "/"
	opaMutatePath   = "/v0/data/system/mutate"
)

// opaOptions configure an OPA server.
type opaOptions struct {
	// Binary is the opa command.
	Binary string
	// Dir receives the policies, data, certificates and log.
	Dir string
	// Fence is data.fence, as fencegate's agent writes it.
	Fence fencestate.State
	// ConfigFile is data.fencegate.config, the file fencegate is given.
	ConfigFile string
	// ReadOptimizedStore turns on --optimize-store-for-read-speed.
	ReadOptimizedStore bool
}

// opaArgs are the flags of OPA's server in its fastest configuration:
// errors-only logging, no decision logs (none is configured), no version
// check.
func opaArgs(readOptimizedStore bool) []string {
	args := []string{"run", "--server", "--log-level", "error", "--skip-version-check"}
	if readOptimizedStore {
		args = append(args, "--optimize-store-for-read-speed")
	}
	return args
}

// startOPA writes the shipped policies with the tutorial's envelope, the
// fence data and a serving certificate for 127.0.0.1 into opts.Dir, and
// starts `opa run --server` over TLS.
func startOPA(ctx context.Context, opts opaOptions) (*serverProcess, error) {
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("OPA directory: %w", err)
	}
	modules, err := opaModules()
	if err != nil {
		return nil, err
	}
	srv, err := newServing(opts.Dir)
	if err != nil {
		return nil, err
	}
	args := append(opaArgs(opts.ReadOptimizedStore), "--addr", srv.addr, "--tls-cert-file", srv.certFile, "--tls-private-key-file", srv.keyFile)
	for name, src := range modules {
		path := filepath.Join(opts.Dir, name)
		if err := os.WriteFile(path, src, 0o600); err != nil {
			return nil, fmt.Errorf("write policy %s: %w", name, err)
		}
		args = append(args, path)
	}
	fence, err := json.MarshalIndent(opts.Fence, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode data.fence: %w", err)
	}
	fenceFile := filepath.Join(opts.Dir, "fence.json")
	if err := os.WriteFile(fenceFile, fence, 0o600); err != nil {
		return nil, fmt.Errorf("write data.fence: %w", err)
	}
	args = append(args, "fence:"+fenceFile, "fencegate.config:"+opts.ConfigFile)
	return startServerProcess(ctx, "opa", opts.Dir, srv, opts.Binary, args...)
}
