package cluster

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recordingTB records how a helper ends a test, and ends only the
// goroutine it runs in (run), as testing does.
type recordingTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f(r) in a goroutine of its own and waits for it to end.
func (r *recordingTB) run(f func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
}

func TestToolsDir(t *testing.T) {
	dir := t.TempDir()
	for _, bin := range []string{"kube-apiserver", "etcd", "helm"} {
		if err := os.WriteFile(filepath.Join(dir, bin), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(AssetsEnv, dir)
	for _, tc := range []struct {
		bins []string
		// want are what the error says; none: no error.
		want []string
	}{
		{bins: []string{"kube-apiserver", "etcd", "helm"}},
		{bins: ControlPlaneBinaries, want: []string{"kubectl not built in " + dir, "`make control-plane` builds them", "`hack/build-tools.sh kube`", AssetsEnv}},
		{bins: []string{"etcd", "opa", "kustomize-controller"}, want: []string{"opa, kustomize-controller not built", "`make tools` builds them all", "`hack/build-tools.sh opa flux`"}},
		{bins: []string{"kubelet", "kube-proxy", "etcdutl", "build-image"}, want: []string{"`make tools` builds them all", "`hack/build-tools.sh kube etcd image`"}},
	} {
		t.Run(strings.Join(tc.bins, ","), func(t *testing.T) {
			got, err := ToolsDir(tc.bins...)
			if len(tc.want) == 0 {
				if err != nil || got != dir {
					t.Fatalf("ToolsDir = %q, %v; want %q, nil", got, err, dir)
				}
				return
			}
			if !errors.Is(err, ErrPrerequisite) {
				t.Fatalf("ToolsDir = %q, %v; want an error that wraps ErrPrerequisite", got, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
		})
	}
}

// TestRequireTools: a missing tool skips the test, or fails it under CI;
// -short skips tests (not benchmarks) before looking.
func TestRequireTools(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(AssetsEnv, dir)
	for _, tc := range []struct {
		name    string
		ci      string
		short   bool
		bench   bool
		bin     string
		skipped bool
		failed  bool
		says    string
	}{
		{name: "built", bin: "etcd"},
		{name: "built under CI", ci: "true", bin: "etcd"},
		{name: "missing", bin: "helm", skipped: true, says: "helm not built"},
		{name: "missing under CI", ci: "true", bin: "helm", failed: true, says: "CI is set"},
		{name: "short", short: true, bin: "etcd", skipped: true, says: "-short (make test-unit): this test starts etcd"},
		{name: "short under CI", ci: "true", short: true, bin: "helm", skipped: true, says: "-short"},
		{name: "short benchmark", short: true, bench: true, bin: "etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			if tc.short != testing.Short() {
				if !tc.short {
					t.Skip("runs without -short only")
				}
				setShort(t)
			}
			if tc.bench {
				// A real benchmark: SkipShort tells one by its type.
				ran := false
				testing.Benchmark(func(b *testing.B) {
					RequireTool(b, tc.bin)
					ran = true
				})
				if !ran {
					t.Fatal("a benchmark was skipped under -short")
				}
				return
			}
			r := &recordingTB{TB: t}
			var got string
			r.run(func(tb testing.TB) { got = RequireTool(tb, tc.bin) })
			if r.skipped != tc.skipped || r.failed != tc.failed {
				t.Fatalf("skipped %v, failed %v (%q); want skipped %v, failed %v", r.skipped, r.failed, r.msg, tc.skipped, tc.failed)
			}
			if !strings.Contains(r.msg, tc.says) {
				t.Errorf("the message %q does not say %q", r.msg, tc.says)
			}
			if !r.skipped && !r.failed && got != filepath.Join(dir, tc.bin) {
				t.Errorf("RequireTool = %q, want %q", got, filepath.Join(dir, tc.bin))
			}
		})
	}
}

// setShort turns -short on until t ends.
func setShort(t *testing.T) {
	t.Helper()
	if err := flag.Set("test.short", "true"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := flag.Set("test.short", "false"); err != nil {
			t.Error(err)
		}
	})
}

// TestStartRefusesUnderShort: a test that reaches Start under -short without
// skipping fails, whatever the tool cache holds; benchmarks (-bench) may.
func TestStartRefusesUnderShort(t *testing.T) {
	dir := t.TempDir()
	for _, bin := range ControlPlaneBinaries {
		if err := os.WriteFile(filepath.Join(dir, bin), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(AssetsEnv, dir)
	if !testing.Short() {
		setShort(t)
	}
	if _, err := Start(Options{Name: "short"}); err == nil || !strings.Contains(err.Error(), "-short") {
		t.Fatalf("Start under -short: %v, want a refusal", err)
	}
	if got, err := AssetsDir(); err == nil {
		t.Fatalf("AssetsDir under -short = %q, want a refusal", got)
	}
	bench := flag.Lookup("test.bench")
	old := bench.Value.String()
	if err := flag.Set("test.bench", "."); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := flag.Set("test.bench", old); err != nil {
			t.Error(err)
		}
	}()
	if got, err := AssetsDir(); err != nil || got != dir {
		t.Fatalf("AssetsDir under -short -bench = %q, %v; want %q", got, err, dir)
	}
}
