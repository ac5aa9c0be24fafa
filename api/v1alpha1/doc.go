// Package v1alpha1 holds the Go types of the Component custom resource
// (components.fencegate.dev/v1alpha1): a workload that only the cluster holding
// the ownership fence may change or actuate. Its status carries the fence
// conditions that fencegate's controller writes.
//
// +kubebuilder:object:generate=true
// +groupName=components.fencegate.dev
package v1alpha1
