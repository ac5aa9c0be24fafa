package policies

import "embed"

// FS holds the shipped Rego files: the policies and their unit tests
// (*_test.rego). The engine compiles the policies and leaves the tests out;
// the Go test of this package runs the tests.
//
//go:embed *.rego
var FS embed.FS
