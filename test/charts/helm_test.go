package charts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/fencegate/fencegate/test/cluster"
)

// kubeVersion is the Kubernetes version the charts are rendered for: the
// one the project's control plane runs. helm built from its Go module
// otherwise assumes an old default that the charts' kubeVersion refuses.
const kubeVersion = "v1.37.2"

const (
	fencegateChart = "fencegate"
	authorityChart = "fencegate-authority"
	release        = "fg"
	namespace      = "fencegate-system"
)

// helmTool runs the project's pinned helm with its own home directories, so
// that tests neither read nor write the user's helm configuration.
type helmTool struct {
	bin, root, home string
	env             []string
}

func newHelm(t *testing.T) *helmTool {
	t.Helper()
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := toolPath(t, root, "helm")
	home := t.TempDir()
	return &helmTool{
		bin: bin, root: root, home: home,
		env: append(os.Environ(),
			"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
			"HELM_DATA_HOME="+filepath.Join(home, "data"),
		),
	}
}

// toolPath returns the path of a pinned tool: in $FENCEGATE_TEST_ASSETS,
// where make puts the tool cache, or else in the repository's .cache/bin;
// it skips the test when the tool is not built (cluster.RequireTool).
func toolPath(t *testing.T, _, name string) string {
	t.Helper()
	return cluster.RequireTool(t, name)
}

// chartDir is the path of a chart in the repository.
func (h *helmTool) chartDir(chart string) string { return filepath.Join(h.root, "charts", chart) }

// ciValues lists the values files of a chart's ci/ folder.
func (h *helmTool) ciValues(t *testing.T, chart string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(h.chartDir(chart), "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in charts/%s/ci: %v", chart, err)
	}
	return files
}

// run runs helm and returns its stdout; a failure is returned with stderr.
func (h *helmTool) run(ctx context.Context, args ...string) (string, error) {
	return h.runWithin(ctx, time.Minute, args...)
}

// runWithin is run with a time limit of its own, for `helm install --wait`.
func (h *helmTool) runWithin(ctx context.Context, limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = h.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, quietStderr(stderr.String()))
	}
	return stdout.String(), nil
}

// quietStderr drops helm's notice that charts/fencegate/policies is a link
// (to the repository's policies, on purpose).
func quietStderr(s string) string {
	var keep []string
	for line := range strings.Lines(s) {
		if !strings.Contains(line, "found symbolic link in path") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// template renders a chart (with its tests and CRDs) for the values files
// and extra arguments (--set ...).
func (h *helmTool) template(ctx context.Context, chart string, valuesFiles []string, extra ...string) (string, error) {
	args := []string{"template", release, h.chartDir(chart), "--namespace", namespace, "--kube-version", kubeVersion, "--include-crds"}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	return h.run(ctx, append(args, extra...)...)
}

// rendered is a chart's output, parsed.
type rendered struct {
	manifest string
	objects  []*unstructured.Unstructured
}

func (h *helmTool) render(t *testing.T, chart string, valuesFiles []string, extra ...string) rendered {
	t.Helper()
	out, err := h.template(t.Context(), chart, valuesFiles, extra...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	return rendered{manifest: out, objects: objs}
}

func parseManifest(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("parse rendered manifest: %w", err)
		}
		if obj == nil {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
}

// get finds the one object of a kind and name, decoded into out.
func (r rendered) get(t *testing.T, kind, name string, out any) {
	t.Helper()
	for _, o := range r.objects {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatalf("decode %s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("no %s %q in the rendered chart; it has %v", kind, name, r.names())
}

// has reports whether an object of a kind and name was rendered.
func (r rendered) has(kind, name string) bool {
	return slices.Contains(r.names(), kind+"/"+name)
}

// count counts the objects of a kind.
func (r rendered) count(kind string) int {
	n := 0
	for _, o := range r.objects {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

func (r rendered) names() []string {
	var names []string
	for _, o := range r.objects {
		names = append(names, o.GetKind()+"/"+o.GetName())
	}
	return names
}

func TestLint(t *testing.T) {
	h := newHelm(t)
	for _, chart := range []string{fencegateChart, authorityChart} {
		for _, values := range h.ciValues(t, chart) {
			t.Run(chart+"/"+filepath.Base(values), func(t *testing.T) {
				out, err := h.run(t.Context(), "lint", "--strict", h.chartDir(chart), "--values", values, "--kube-version", kubeVersion)
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
			})
		}
	}
}

// setValues are helm's --set arguments for values (each "path=value").
func setValues(values ...string) []string {
	var args []string
	for _, v := range values {
		args = append(args, "--set", v)
	}
	return args
}
