package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reMarkOutput is BenchmarkReMark's result line as `go test -bench`
// prints it.
const reMarkOutput = `goos: linux
goarch: amd64
pkg: github.com/fencegate/fencegate/controller
cpu: Intel(R) Xeon(R) Processor
BenchmarkReMark/components=1000-2         	       1	15699356389 ns/op	       123.5 bare-objects/s	       132.5 objects/s	         1.073 ratio	         7.547 s/remark
BenchmarkReMark/components=3000-2         	       1	50172822504 ns/op	        92.60 bare-objects/s	       170.9 objects/s	         1.845 ratio	        17.55 s/remark
PASS
`

func TestRun(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "bench.txt")
	if err := os.WriteFile(bench, []byte(reMarkOutput), 0o644); err != nil {
		t.Fatal(err)
	}
	badJSON := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badJSON, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args     func(out string) []string
		wantErr  string
		wantPage []string
		wantSVGs []string
	}{
		"a plot and what is left out": {
			args: func(out string) []string {
				return []string{"-in", bench, "-sidebyside", filepath.Join(dir, "missing.json"), "-o", out, "-svg", filepath.Join(dir, "svg"), "-note", "Reduced."}
			},
			wantPage: []string{"<svg", "Re-mark time against Components", "Reduced.",
				"Admission latency against offered load: left out, there are no side-by-side measurements"},
			wantSVGs: []string{"remark.svg"},
		},
		"nothing to plot is a page that says so": {
			args:     func(out string) []string { return []string{"-o", out} },
			wantPage: []string{"<h2>Left out</h2>", "BenchmarkCacheMemory reported no"},
		},
		"no output":              {args: func(string) []string { return []string{"-in", bench} }, wantErr: "-o FILE or -svg DIR"},
		"a missing bench output": {args: func(out string) []string { return []string{"-in", filepath.Join(dir, "none.txt"), "-o", out} }, wantErr: "none.txt"},
		"a broken JSON file":     {args: func(out string) []string { return []string{"-sidebyside", badJSON, "-o", out} }, wantErr: "bad.json"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "bench.html")
			err := run(tc.args(out))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("run error = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			page, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.wantPage {
				if !strings.Contains(string(page), want) {
					t.Errorf("the page does not say %q", want)
				}
			}
			for _, name := range tc.wantSVGs {
				if _, err := os.Stat(filepath.Join(dir, "svg", name)); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
