// Package cluster starts real Kubernetes control planes (kube-apiserver and
// etcd) on loopback for tests and for the local demo. Each control plane is
// independent, so several of them can play the clusters of a failover. The
// binaries come from the project's tool cache (hack/build-tools.sh kube etcd);
// nothing is downloaded.
package cluster
