// Package stack runs fencegate on one machine the way it is deployed: a
// fence authority process with embedded etcd and, per cluster, a real
// control plane (kube-apiserver and etcd) served by a `fencegate run`
// process that the API server calls over TLS for admission. `make run` and
// the end-to-end scenario tests drive it.
package stack
