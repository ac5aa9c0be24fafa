package cluster

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

const modulePath = "github.com/fencegate/fencegate"

// ModuleRoot finds the fencegate module's root directory by walking up from
// the working directory, as `go test` runs each package in its own folder.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Equal(firstModuleLine(mod), []byte("module "+modulePath)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func firstModuleLine(mod []byte) []byte {
	for line := range bytes.Lines(mod) {
		if bytes.HasPrefix(line, []byte("module ")) {
			return bytes.TrimSpace(line)
		}
	}
	return nil
}

// AssetsDir returns the directory that holds kube-apiserver, etcd and kubectl,
// and checks that all three are there; when one is not, the error wraps
// ErrPrerequisite and says how to build them. Every control plane and node
// starts here: under go test -short (make test-unit) it refuses, unless
// benchmarks run (their -short is a size), so that a test that forgot to
// skip fails instead of starting one.
func AssetsDir() (string, error) {
	if shortTestRun() {
		return "", errors.New("a control plane started under go test -short (make test-unit): the test must skip first (cluster.RequireControlPlane, which StartForTest calls)")
	}
	return ToolsDir(ControlPlaneBinaries...)
}

// shortTestRun tells whether this is a test binary run with -short and
// without -bench. It reads the flags, as testing.Short panics before they
// are parsed.
func shortTestRun() bool {
	if !testing.Testing() {
		return false
	}
	short, bench := flag.Lookup("test.short"), flag.Lookup("test.bench")
	return short != nil && short.Value.String() == "true" && (bench == nil || bench.Value.String() == "")
}
