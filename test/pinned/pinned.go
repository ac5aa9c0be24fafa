package pinned

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fencegate/fencegate/test/cluster"
)

// Module is a module as `go mod download -json` reports it: its path and
// version, where the module cache holds its files and its go.mod.
type Module struct{ Path, Version, Dir, GoMod, Error string }

// ToolsModule returns the directory of the module hack/tools/<name> (flux,
// crds, …) of the repository, which pins the versions of its projects.
func ToolsModule(name string) (string, error) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "hack", "tools", name), nil
}

// Download runs `go mod download -json` for modules in moduleDir and
// returns what it downloaded (or found in the module cache) by module
// path. A module given without a version is taken at the version
// moduleDir's go.mod requires.
func Download(ctx context.Context, moduleDir string, modules ...string) (map[string]Module, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"mod", "download", "-json"}, modules...)...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s in %s: %w\n%s", strings.Join(modules, " "), moduleDir, err, stderr.String())
	}
	got := map[string]Module{}
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var m Module
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("go mod download -json: %w", err)
		}
		if m.Error != "" || m.Dir == "" {
			return nil, fmt.Errorf("go mod download %s@%s: %q", m.Path, m.Version, m.Error)
		}
		got[m.Path] = m
	}
	return got, nil
}

// FluxModules are the pinned Flux modules whose CRDs FluxCRDs returns.
type FluxModules struct {
	// KustomizeController is kustomize-controller, as hack/tools/flux pins
	// it; SourceController is source-controller at the version of the
	// source API that kustomize-controller requires.
	KustomizeController, SourceController Module
	// CRDs are the CRD files, in the module cache: the Kustomization's,
	// then the source kinds' (GitRepository, OCIRepository, Bucket).
	CRDs []string
}

// Flux finds the CRDs of the pinned Flux modules, read from the module
// cache: kustomize-controller's (hack/tools/flux pins it) and the source
// kinds it watches (GitRepository, OCIRepository, Bucket), from
// source-controller at the version of the source API that
// kustomize-controller requires. Neither is a copy.
func Flux(ctx context.Context) (_ *FluxModules, err error) {
	tools, err := ToolsModule("flux")
	if err != nil {
		return nil, err
	}
	pinned, err := Download(ctx, tools, "github.com/fluxcd/kustomize-controller", "github.com/fluxcd/source-controller/api")
	if err != nil {
		return nil, err
	}
	kc := pinned["github.com/fluxcd/kustomize-controller"]
	api := pinned["github.com/fluxcd/source-controller/api"].Version

	// source-controller's root module is no dependency of the tools
	// module (its API module is): download it in a scratch module, not to
	// touch hack/tools/flux/go.sum. Its CRDs are generated from the API
	// module of the same version, which its go.mod requires.
	scratch, err := os.MkdirTemp("", "fencegate-fluxcrds-")
	if err != nil {
		return nil, fmt.Errorf("scratch module: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(scratch)) }()
	if err := os.WriteFile(filepath.Join(scratch, "go.mod"), []byte("module fluxcrds\n\ngo 1.26.0\n"), 0o600); err != nil {
		return nil, fmt.Errorf("scratch module: %w", err)
	}
	downloaded, err := Download(ctx, scratch, "github.com/fluxcd/source-controller@"+api)
	if err != nil {
		return nil, err
	}
	sc := downloaded["github.com/fluxcd/source-controller"]
	mod, err := os.ReadFile(sc.GoMod)
	if err != nil {
		return nil, fmt.Errorf("the go.mod of source-controller %s: %w", sc.Version, err)
	}
	if !strings.Contains(string(mod), "github.com/fluxcd/source-controller/api "+api) {
		return nil, fmt.Errorf("source-controller %s does not require its API module at %s: its CRDs may not be the ones kustomize-controller reads", sc.Version, api)
	}
	crds := []string{filepath.Join(kc.Dir, "config", "crd", "bases", "kustomize.toolkit.fluxcd.io_kustomizations.yaml")}
	for _, kind := range []string{"gitrepositories", "ocirepositories", "buckets"} {
		crds = append(crds, filepath.Join(sc.Dir, "config", "crd", "bases", "source.toolkit.fluxcd.io_"+kind+".yaml"))
	}
	for _, crd := range crds {
		if _, err := os.Stat(crd); err != nil {
			return nil, fmt.Errorf("CRD of the pinned Flux modules: %w", err)
		}
	}
	return &FluxModules{KustomizeController: kc, SourceController: sc, CRDs: crds}, nil
}

// FluxCRDs returns the CRD files of Flux's pinned modules (see Flux).
func FluxCRDs(ctx context.Context) ([]string, error) {
	f, err := Flux(ctx)
	if err != nil {
		return nil, err
	}
	return f.CRDs, nil
}

// GenerateCRDs writes the CRDs of the API types of module m into dir, as a
// project whose API module holds only Go types generates them: controller-gen
// crd:crdVersions=v1 paths=./..., run in the module's directory in the
// module cache, so that its packages load at the versions of the module's
// own go.mod and go.sum. controllerGen is the controller-gen to run
// (hack/build-tools.sh controller-gen). The files are named as
// controller-gen names them, <group>_<plural>.yaml.
func GenerateCRDs(ctx context.Context, controllerGen string, m Module, dir string) error {
	cmd := exec.CommandContext(ctx, controllerGen, "crd:crdVersions=v1", "paths=./...", "output:crd:artifacts:config="+dir)
	cmd.Dir = m.Dir
	// The module cache is read-only: the module's go.sum must be all the
	// loader needs, as it is for the project's own generation.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("controller-gen in %s@%s: %w\n%s", m.Path, m.Version, err, out)
	}
	return nil
}

// Requirement returns the version at which the go.mod of m requires module
// path ("" when it does not).
func Requirement(m Module, path string) (string, error) {
	mod, err := os.ReadFile(m.GoMod)
	if err != nil {
		return "", fmt.Errorf("the go.mod of %s@%s: %w", m.Path, m.Version, err)
	}
	for line := range strings.Lines(string(mod)) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path && f[1] != "=>" {
			return f[1], nil
		}
	}
	return "", nil
}
