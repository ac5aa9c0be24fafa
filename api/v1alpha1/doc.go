// Package v1alpha1 holds the Go types of fencegate's custom resources
// (components.fencegate.dev/v1alpha1): the Component, a workload that only the
// cluster holding the ownership fence may change or actuate, whose status
// carries the fence conditions that fencegate's controller writes; and the
// Fence, this cluster's view of one fence domain, whose spec.epoch fails over
// to this cluster and whose status says whether it holds the fence and
// enforces what it knows.
//
// +kubebuilder:object:generate=true
// +groupName=components.fencegate.dev
package v1alpha1
