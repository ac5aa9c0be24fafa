package policies

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// FS holds the shipped Rego files: the policies and their unit tests
// (*_test.rego). The engine compiles the policies and leaves the tests out;
// the Go test of this package runs the tests.
//
//go:embed *.rego
var FS embed.FS

// Shipped returns the shipped policies by file name, without their unit
// tests: what fencegate compiles when no policy directory is given.
func Shipped() (map[string][]byte, error) {
	names, err := fs.Glob(FS, "*.rego")
	if err != nil {
		return nil, fmt.Errorf("list the shipped policies: %w", err)
	}
	modules := map[string][]byte{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.rego") {
			continue
		}
		src, err := fs.ReadFile(FS, name)
		if err != nil {
			return nil, fmt.Errorf("read the shipped policy %s: %w", name, err)
		}
		modules[name] = src
	}
	if len(modules) == 0 {
		return nil, errors.New("no shipped policies in the policies package")
	}
	return modules, nil
}
