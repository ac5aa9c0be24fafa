// Package e2e holds end-to-end tests of fencegate on real control planes
// (kube-apiserver and etcd) with the real kubectl.
package e2e
