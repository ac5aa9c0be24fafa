package fenceobject

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// TargetEpoch is the epoch a cluster declares: spec.epoch when it is above
// floor, the epoch fencegate was started with, and floor otherwise.
func TargetEpoch(floor uint64, f *fencegatev1alpha1.Fence) uint64 {
	if f != nil && f.Spec.Epoch != nil && *f.Spec.Epoch > 0 && uint64(*f.Spec.Epoch) > floor {
		return uint64(*f.Spec.Epoch)
	}
	return floor
}

// Ensure returns the domain's Fence, read through r, and creates it with
// spec.epoch unset when it is missing. It never changes an existing Fence:
// spec belongs to the operator. fencegate run calls it before its agent
// starts, so that the first declaration is already at spec.epoch: a
// restarted process that declared its lower --epoch first would be
// refused as a restored cluster (epoch_regressed) for a moment.
func Ensure(ctx context.Context, c client.Writer, r client.Reader, domain string) (*fencegatev1alpha1.Fence, error) {
	var f fencegatev1alpha1.Fence
	err := r.Get(ctx, client.ObjectKey{Name: domain}, &f)
	if apierrors.IsNotFound(err) {
		f = fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: domain}}
		err = c.Create(ctx, &f)
		if apierrors.IsAlreadyExists(err) {
			// Another replica created it first.
			err = r.Get(ctx, client.ObjectKey{Name: domain}, &f)
		}
	}
	if err != nil {
		return nil, explain(err, domain)
	}
	return &f, nil
}

// explain says what to do about an error reading or creating the Fence.
func explain(err error, domain string) error {
	switch {
	case meta.IsNoMatchError(err):
		return fmt.Errorf("the Fence resource (fences.components.fencegate.dev) is not installed on this cluster: apply the CRDs of this release (kubectl apply -f charts/fencegate/crds/); helm installs crds/ on install only, not on upgrade: %w", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("fencegate may not read or create the Fence %q: grant its service account get, list, watch and create on fences and patch on fences/status (the chart's ClusterRole does): %w", domain, err)
	}
	return fmt.Errorf("get or create the Fence %q: %w", domain, err)
}
