package cluster

import (
	"bytes"
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
// and checks that all three are there; when one is not, the error wraps
// ErrPrerequisite and says how to build them.
func AssetsDir() (string, error) {
	return ToolsDir(ControlPlaneBinaries...)
}
