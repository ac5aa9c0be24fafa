package fenceagent

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// IdentityNamespace is the Namespace whose UID identifies a cluster: it
// exists in every cluster, survives an etcd snapshot restore, and is new in a
// cluster rebuilt from manifests.
const IdentityNamespace = metav1.NamespaceSystem

// ResolveClusterUID returns this cluster's UID: override when it is set
// (--cluster-uid / FENCEGATE_CLUSTER_UID, for clusters where reading
// kube-system is not allowed), otherwise the UID of the kube-system
// Namespace read through c. Read it with an uncached reader (a manager's
// APIReader): the agent needs one Namespace, not a cache of all of them.
func ResolveClusterUID(ctx context.Context, c client.Reader, override string) (string, error) {
	if uid := strings.TrimSpace(override); uid != "" {
		return uid, nil
	}
	const fix = "grant the agent's service account RBAC \"get\" on namespaces/kube-system, or set the cluster UID with --cluster-uid (FENCEGATE_CLUSTER_UID)"
	if c == nil {
		return "", fmt.Errorf("cannot read the cluster UID without a Kubernetes client: %s", fix)
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: IdentityNamespace}, &ns); err != nil {
		return "", fmt.Errorf("read the UID of Namespace %s (this cluster's identity): %w; %s", IdentityNamespace, err, fix)
	}
	if ns.UID == "" {
		return "", fmt.Errorf("namespace %s has no UID: %s", IdentityNamespace, fix)
	}
	return string(ns.UID), nil
}
