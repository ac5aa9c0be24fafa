package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/test/cluster"
)

// TestFenceEpochRule: the CEL rule on spec.epoch, as the API server of a
// real control plane applies it from the generated CRD. spec.epoch only
// rises, but a value the authority never accepted (above status.epoch)
// may be lowered back to status.epoch or above: a typo can be undone, an
// accepted epoch cannot be lowered. Without status.epoch (a Fence made
// again) nothing says which values were accepted: none may be lowered.
func TestFenceEpochRule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "crd"})

	tests := map[string]struct {
		// spec and accepted are the Fence's spec.epoch and status.epoch
		// before the patch (nil, 0: unset).
		spec     *int64
		accepted int64
		// patch is the merge patch of the Fence.
		patch   string
		refused bool
	}{
		"raise":                                  {spec: ptr.To[int64](3), accepted: 3, patch: `{"spec":{"epoch":4}}`},
		"keep":                                   {spec: ptr.To[int64](3), accepted: 3, patch: `{"spec":{"epoch":3}}`},
		"set for the first time":                 {accepted: 3, patch: `{"spec":{"epoch":1}}`},
		"raise a value never accepted further":   {spec: ptr.To[int64](70000), accepted: 3, patch: `{"spec":{"epoch":80000}}`},
		"lower a value never accepted to it":     {spec: ptr.To[int64](70000), accepted: 3, patch: `{"spec":{"epoch":3}}`},
		"lower a value never accepted above it":  {spec: ptr.To[int64](70000), accepted: 3, patch: `{"spec":{"epoch":5}}`},
		"raise a value with no status yet":       {spec: ptr.To[int64](70000), patch: `{"spec":{"epoch":80000}}`},
		"lower a value with no status yet":       {spec: ptr.To[int64](70000), patch: `{"spec":{"epoch":2}}`, refused: true},
		"lower a value with no status to 1":      {spec: ptr.To[int64](3), patch: `{"spec":{"epoch":1}}`, refused: true},
		"lower a value never accepted by one":    {spec: ptr.To[int64](70000), accepted: 3, patch: `{"spec":{"epoch":69999}}`},
		"lower a value never accepted below it":  {spec: ptr.To[int64](70000), accepted: 3, patch: `{"spec":{"epoch":2}}`, refused: true},
		"lower an accepted value":                {spec: ptr.To[int64](3), accepted: 3, patch: `{"spec":{"epoch":2}}`, refused: true},
		"lower a value below the accepted epoch": {spec: ptr.To[int64](2), accepted: 3, patch: `{"spec":{"epoch":1}}`, refused: true},
		"unset a value never accepted":           {spec: ptr.To[int64](70000), accepted: 3, patch: `{"spec":{"epoch":null}}`, refused: true},
		"unset an accepted value":                {spec: ptr.To[int64](3), accepted: 3, patch: `{"spec":{"epoch":null}}`, refused: true},
		"drop the spec":                          {spec: ptr.To[int64](3), accepted: 3, patch: `{"spec":null}`, refused: true},
	}
	n := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n++
			f := &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rule-%d", n)}, Spec: fencegatev1alpha1.FenceSpec{Epoch: tc.spec}}
			if err := cp.Client.Create(ctx, f); err != nil {
				t.Fatalf("create: %v", err)
			}
			if tc.accepted != 0 {
				f.Status.Epoch = tc.accepted
				if err := cp.Client.Status().Update(ctx, f); err != nil {
					t.Fatalf("write status.epoch %d: %v", tc.accepted, err)
				}
			}
			err := cp.Client.Patch(ctx, f, client.RawPatch("application/merge-patch+json", []byte(tc.patch)))
			switch {
			case tc.refused && err == nil:
				t.Fatalf("patch %s admitted: spec.epoch is now %v", tc.patch, f.Spec.Epoch)
			case tc.refused && !strings.Contains(err.Error(), "spec.epoch may only rise") || tc.refused && !strings.Contains(err.Error(), "never accepted (above status.epoch"):
				t.Fatalf("patch %s: %v, want the rule's message", tc.patch, err)
			case !tc.refused && err != nil:
				t.Fatalf("patch %s: %v", tc.patch, err)
			}
		})
	}

	// Status writes leave spec as it is, whatever they do to status.epoch.
	t.Run("status writes pass", func(t *testing.T) {
		f := &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: "status"}, Spec: fencegatev1alpha1.FenceSpec{Epoch: ptr.To[int64](5)}}
		if err := cp.Client.Create(ctx, f); err != nil {
			t.Fatal(err)
		}
		for _, epoch := range []int64{7, 3, 0} {
			f.Status.Epoch = epoch
			if err := cp.Client.Status().Update(ctx, f); err != nil {
				t.Errorf("status.epoch %d: %v", epoch, err)
			}
		}
	})
}
