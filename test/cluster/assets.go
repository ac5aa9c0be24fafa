package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// and checks that all three are there.
func AssetsDir() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".cache", "bin")
	}
	var missing []error
	for _, bin := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			missing = append(missing, err)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("control-plane binaries missing in %s (build them with `hack/build-tools.sh kube etcd`, which `make test` runs, or point %s at them): %w",
			dir, AssetsEnv, errors.Join(missing...))
	}
	return dir, nil
}
