// Package pinned finds files of the projects fencegate's tests and
// walkthrough pin as Go modules (hack/tools/flux, hack/tools/crds): their
// CRDs, read from the module cache or generated from their API modules
// there, never copied.
package pinned
