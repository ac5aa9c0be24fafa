// Package stack runs fencegate on one machine the way it is deployed: a
// fence authority process with embedded etcd (optionally served with mTLS
// and an authorization file, each cluster declaring with a client
// certificate of its own identity) and, per cluster, a real control plane
// (kube-apiserver and etcd) served by one or more `fencegate run` processes,
// the first of which the API server calls over TLS for admission. One
// kubeconfig holds a context per cluster. `make run` and the end-to-end
// scenario tests drive it.
package stack
