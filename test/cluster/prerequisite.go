package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ErrPrerequisite marks something a test runs that is not on this machine:
// a pinned tool not built, root, a Debian package. MissingPrerequisite
// skips on it, saying what to do, so that `go test ./...` passes on a fresh
// clone; under CI it fails.
var ErrPrerequisite = errors.New("test prerequisite missing")

// ControlPlaneBinaries are what every control plane runs: RequireControlPlane
// checks for them.
var ControlPlaneBinaries = []string{"kube-apiserver", "etcd", "kubectl"}

// MissingPrerequisite skips tb, saying what is missing (err); when CI is set
// (CI services and fresh-ci set it) it fails tb instead, so that a green CI
// run has run every test and none was skipped for want of a tool.
func MissingPrerequisite(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") != "" {
		tb.Fatalf("%v (CI is set: every test must run)", err)
	}
	tb.Skip(err)
}

// SkipShort skips tb under -short (make test-unit), which runs no process
// that a test would wait on: no control plane, no etcd, no node, no pinned
// tool. what says what the test would have started. A benchmark is not
// skipped: -short only sets its size, and make test-unit runs none.
func SkipShort(tb testing.TB, what string) {
	tb.Helper()
	if _, bench := tb.(*testing.B); bench || !testing.Short() {
		return
	}
	tb.Skipf("-short (make test-unit): this test starts %s; make test runs it", what)
}

// RequireControlPlane skips tb under -short, and when kube-apiserver, etcd
// or kubectl is not built (MissingPrerequisite: under CI it fails); it
// returns the directory that holds them. Every test that starts a control
// plane calls it, through StartForTest, before it starts anything.
func RequireControlPlane(tb testing.TB) string {
	tb.Helper()
	return RequireTools(tb, ControlPlaneBinaries...)
}

// RequireTools is RequireControlPlane for the named binaries of the tool
// cache (helm, opa, promtool, kustomize-controller, controller-gen, …); it
// returns their directory.
func RequireTools(tb testing.TB, bins ...string) string {
	tb.Helper()
	SkipShort(tb, strings.Join(bins, ", "))
	dir, err := ToolsDir(bins...)
	if err != nil {
		MissingPrerequisite(tb, err)
	}
	return dir
}

// RequireTool is RequireTools for one binary; it returns the binary's path.
func RequireTool(tb testing.TB, bin string) string {
	tb.Helper()
	return filepath.Join(RequireTools(tb, bin), bin)
}

// ToolsDir returns the tool cache ($FENCEGATE_TEST_ASSETS, else .cache/bin at
// the module root) when it holds every one of bins; otherwise an error
// that wraps ErrPrerequisite and says which make target builds them.
func ToolsDir(bins ...string) (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", fmt.Errorf("%w: the tool cache: %w", ErrPrerequisite, err)
		}
		dir = filepath.Join(root, ".cache", "bin")
	}
	var missing, targets []string
	for _, bin := range bins {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			missing = append(missing, bin)
			if t := buildTarget(bin); !slices.Contains(targets, t) {
				targets = append(targets, t)
			}
		}
	}
	if len(missing) == 0 {
		return dir, nil
	}
	how := "`make tools` builds them all"
	if !slices.Contains(targets, "tools") {
		how = "`make control-plane` builds them, `make tools` every pinned tool"
	}
	return "", fmt.Errorf("%w: %s not built in %s (%s; `hack/build-tools.sh %s` builds just these; or point %s at a directory that has them)",
		ErrPrerequisite, strings.Join(missing, ", "), dir, how, strings.Join(buildToolsNames(missing), " "), AssetsEnv)
}

// buildTarget is the make target that builds bin: the control plane's
// binaries have one of their own.
func buildTarget(bin string) string {
	if slices.Contains(ControlPlaneBinaries, bin) {
		return "control-plane"
	}
	return "tools"
}

// buildToolsNames maps binaries to the hack/build-tools.sh names that build
// them.
func buildToolsNames(bins []string) []string {
	var names []string
	for _, bin := range bins {
		name := bin
		switch {
		case strings.HasPrefix(bin, "kube"): // kube-apiserver, kubectl, kubelet, kube-proxy, …
			name = "kube"
		case bin == "etcdutl":
			name = "etcd"
		case bin == "kustomize-controller":
			name = "flux"
		case bin == "build-image":
			name = "image"
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}
