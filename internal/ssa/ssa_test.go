package ssa_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/internal/ssa"
	"github.com/fencegate/fencegate/test/cluster"
)

// TestOwnedStatusFields, on a real API server: each manager's apply owns
// its entry of a Fence's status.instances, and RemoveListItems removes the
// entries named, only while each still holds its name.
func TestOwnedStatusFields(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "ssa"})
	gvk := fencegatev1alpha1.GroupVersion.WithKind("Fence")

	tests := map[string]struct {
		remove []ssa.Item
		// want is the entries left; wantErr a part of the error.
		want    []string
		wantErr string
	}{
		"remove two of three, named in any order": {
			remove: []ssa.Item{{Index: 0, Key: "a"}, {Index: 2, Key: "c"}},
			want:   []string{"b"},
		},
		"nothing to remove patches nothing": {
			want: []string{"a", "b", "c"},
		},
		"an item that moved fails the patch and loses nothing": {
			remove:  []ssa.Item{{Index: 2, Key: "c"}, {Index: 1, Key: "a"}},
			want:    []string{"a", "b", "c"},
			wantErr: "remove 2 item(s) from /status/instances of \"",
		},
	}
	n := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n++
			domain := fmt.Sprintf("ssa-%d", n)
			f := &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: domain}}
			if err := cp.Client.Create(ctx, f); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKey{Name: domain}
			for _, entry := range []string{"a", "b", "c"} {
				status := fencegatev1alpha1.ClusterFenceStatus{Instances: []fencegatev1alpha1.FenceInstance{{Name: entry, State: "active"}}}
				if err := ssa.ApplyStatus(ctx, cp.Client, gvk, key, &status, "test-"+entry); err != nil {
					t.Fatal(err)
				}
			}
			if err := cp.Client.Get(ctx, key, f); err != nil {
				t.Fatal(err)
			}
			err := ssa.RemoveListItems(ctx, cp.Client, f, "/status/instances", "name", tc.remove, "test-pruner")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("RemoveListItems: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("RemoveListItems: %v, want an error with %q", err, tc.wantErr)
			}
			if err := cp.Client.Get(ctx, key, f); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range f.Status.Instances {
				got = append(got, e.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("entries %v, want %v", got, tc.want)
			}
		})
	}
}
