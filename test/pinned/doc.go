// Package pinned finds files of the projects fencegate's tests and
// walkthrough pin as Go modules (hack/tools/flux, hack/tools/crds): their
// CRDs, read from the module cache, never copied.
package pinned
