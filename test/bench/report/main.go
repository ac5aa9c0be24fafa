// Command report draws fencegate's cost curves (package curves) from the
// output of `go test -bench` and the side-by-side run's JSON, as one HTML
// page of SVG plots:
//
//	cd test/bench && go run ./report -in ../../reports/bench-<stamp>.txt \
//	    -sidebyside ../../reports/bench-<stamp>.json -o ../../reports/bench-<stamp>.html
//
// -svg DIR also writes each plot to DIR/<name>.svg. A plot whose data is
// missing (a benchmark that did not run, a side-by-side run without
// -rates) is left out, and the page says so.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/fencegate/fencegate/test/bench/benchdata"
	"github.com/fencegate/fencegate/test/bench/curves"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	flags := flag.NewFlagSet("report", flag.ContinueOnError)
	var ins []string
	flags.Func("in", "a file of `go test -bench` output (repeat for more)", func(v string) error {
		ins = append(ins, v)
		return nil
	})
	sideBySide := flags.String("sidebyside", "", "the side-by-side run's JSON (test/bench's -json FILE)")
	out := flags.String("o", "", "the HTML file to write")
	svgDir := flags.String("svg", "", "also write each plot to this directory as <name>.svg")
	note := flags.String("note", "", "a sentence added to the page and to every caption (say so when a run was reduced)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *out == "" && *svgDir == "" {
		return errors.New("-o FILE or -svg DIR: where to write the plots")
	}

	in := curves.Inputs{Note: *note, Bench: curves.Benchmarks{Config: map[string]string{}}}
	var sources []string
	for _, path := range ins {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		bs, err := curves.Parse(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		in.Bench.Results = append(in.Bench.Results, bs.Results...)
		for k, v := range bs.Config {
			if _, seen := in.Bench.Config[k]; !seen {
				in.Bench.Config[k] = v
			}
		}
		sources = append(sources, path)
	}
	in.BenchSource = strings.Join(ins, ", ")
	if *sideBySide != "" {
		in.SideBySideSource = *sideBySide
		sbs, err := readSideBySide(*sideBySide)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(os.Stderr, "report: %s does not exist: the side-by-side plot is left out\n", *sideBySide)
		case err != nil:
			return err
		default:
			in.SideBySide = sbs
			sources = append(sources, *sideBySide)
		}
	}

	figs, missing, err := curves.Figures(in)
	if err != nil {
		return err
	}
	for _, m := range missing {
		fmt.Fprintln(os.Stderr, "report:", m)
	}
	if *svgDir != "" {
		paths, err := curves.WriteSVGs(*svgDir, figs)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "report: plots written to %s\n", strings.Join(paths, ", "))
	}
	if *out == "" {
		return nil
	}
	var buf bytes.Buffer
	if err := curves.WriteHTML(&buf, curves.Page{
		Generated: time.Now(), Commit: commit(), Sources: sources, Note: *note, Figures: figs, Missing: missing,
	}); err != nil {
		return err
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	fmt.Fprintf(os.Stderr, "report: %d plots written to %s\n", len(figs), *out)
	return nil
}

func readSideBySide(path string) (*benchdata.SideBySide, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var sbs benchdata.SideBySide
	if err := json.Unmarshal(data, &sbs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &sbs, nil
}

// commit is the checkout the report is written in.
func commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
