package policies_test

import (
	"bytes"
	"context"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/fencegate/fencegate/policies"
)

// minCoverage is the share of each policy file's lines that its Rego unit
// tests must evaluate: every rule has a test.
const minCoverage = 95.0

// readModules parses every embedded Rego file, the unit tests included.
func readModules(t *testing.T) (map[string]*ast.Module, map[string][]byte) {
	t.Helper()
	names, err := fs.Glob(policies.FS, "*.rego")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded Rego files (%v)", err)
	}
	modules := map[string]*ast.Module{}
	sources := map[string][]byte{}
	for _, name := range names {
		src, err := fs.ReadFile(policies.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ast.ParseModuleWithOpts(name, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		modules[name], sources[name] = m, src
	}
	return modules, sources
}

// TestRego runs the Rego unit tests (*_test.rego) with OPA's test runner, as
// `opa test policies/` does, and checks that they cover every policy file.
func TestRego(t *testing.T) {
	modules, _ := readModules(t)
	coverage := cover.New()
	results := runRego(t, tester.NewRunner().SetCoverageQueryTracer(coverage), modules)
	if len(results) < 40 {
		t.Errorf("ran %d Rego tests; the policies have more than that", len(results))
	}
	var failed []string
	for _, r := range results {
		t.Run(strings.TrimPrefix(r.Package, "data.")+"."+r.Name, func(t *testing.T) {
			switch {
			case r.Error != nil:
				t.Errorf("%s: error: %v\n%s", r.Location, r.Error, r.Output)
			case r.Fail:
				failed = append(failed, regexp.QuoteMeta(r.Name))
				t.Errorf("%s: failed\n%s", r.Location, r.Output)
			case r.Skip:
				t.Skipf("%s: skipped", r.Location)
			}
		})
	}
	if len(failed) > 0 {
		// Coverage and tracing do not mix: run the failures again, traced,
		// to show the expression that failed.
		traced := tester.NewRunner().EnableTracing(true).Filter(`\.(` + strings.Join(failed, "|") + `)$`)
		for _, r := range runRego(t, traced, modules) {
			t.Logf("%s %s: the end of its trace:\n%s", r.Package, r.Name, traceTail(r.Trace))
		}
		return
	}

	report := coverage.Report(modules)
	for name := range modules {
		if strings.HasSuffix(name, "_test.rego") {
			continue
		}
		file := report.Files[name]
		if file == nil {
			t.Errorf("%s: no line evaluated by the Rego tests", name)
			continue
		}
		if file.Coverage < minCoverage {
			var lines []int
			for _, r := range file.NotCovered {
				lines = append(lines, r.Start.Row)
			}
			t.Errorf("%s: Rego tests cover %.1f%% of its lines, want at least %.0f%%; not covered: lines %v",
				name, file.Coverage, minCoverage, lines)
		}
	}
}

func runRego(t *testing.T, runner *tester.Runner, modules map[string]*ast.Module) []*tester.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch, err := runner.SetTimeout(30*time.Second).SetModules(modules).RunTests(ctx, nil)
	if err != nil {
		t.Fatalf("run Rego tests: %v", err)
	}
	var results []*tester.Result
	for r := range ch {
		results = append(results, r)
	}
	return results
}

// traceTail renders the last lines of a test's trace, which show the
// expression that failed.
func traceTail(trace []*topdown.Event) string {
	var buf bytes.Buffer
	topdown.PrettyTraceWithLocation(&buf, trace)
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestFormatted checks what `opa fmt --list` checks.
func TestFormatted(t *testing.T) {
	_, sources := readModules(t)
	for name, src := range sources {
		formatted, err := format.Source(name, src)
		if err != nil {
			t.Errorf("format %s: %v", name, err)
			continue
		}
		if !bytes.Equal(formatted, src) {
			t.Errorf("%s is not formatted: run opa fmt -w policies/", name)
		}
	}
}

// TestStrict checks what `opa check --strict` checks.
func TestStrict(t *testing.T) {
	modules, _ := readModules(t)
	compiler := ast.NewCompiler().WithStrict(true)
	if compiler.Compile(modules); compiler.Failed() {
		t.Errorf("opa check --strict fails:\n%v", compiler.Errors)
	}
}
