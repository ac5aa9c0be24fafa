package engine

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRecentHolds(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	obj := func(kind string, n int) map[string]any {
		return map[string]any{"apiVersion": "example.io/v1", "kind": kind, "metadata": map[string]any{"name": strings.Repeat("x", n)}}
	}
	name := func(o []byte) string {
		var v struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(o, &v); err != nil {
			t.Fatal(err)
		}
		return v.Kind + "/" + v.Metadata.Name
	}
	tests := map[string]struct {
		record func(r *recentHolds)
		want   []string
	}{
		"a kind already kept is kept again at most once a second": {
			record: func(r *recentHolds) {
				r.record("default", obj("A", 1), start)
				r.record("default", obj("A", 2), start.Add(time.Second/2))
				r.record("default", obj("A", 3), start.Add(time.Second))
			},
			want: []string{"A/x", "A/xxx"},
		},
		"the first object of a kind is kept at once": {
			record: func(r *recentHolds) {
				r.record("default", obj("A", 1), start)
				r.record("default", obj("B", 1), start)
				r.record("default", obj("B", 2), start)
			},
			want: []string{"A/x", "B/x"},
		},
		"the last few are kept": {
			record: func(r *recentHolds) {
				for i := range recentHoldsSize + 2 {
					r.record("default", obj("A", i+1), start.Add(time.Duration(i)*time.Second))
				}
			},
			want: func() []string {
				var out []string
				for i := 3; i <= recentHoldsSize+2; i++ {
					out = append(out, "A/"+strings.Repeat("x", i))
				}
				return out
			}(),
		},
		"large objects are not kept": {
			record: func(r *recentHolds) {
				r.record("default", obj("A", recentHoldMaxBytes), start)
				r.record("default", obj("A", 1), start)
			},
			want: []string{"A/x"},
		},
	}
	for label, tc := range tests {
		t.Run(label, func(t *testing.T) {
			var r recentHolds
			tc.record(&r)
			var got []string
			for _, h := range r.list() {
				got = append(got, name(h.object))
			}
			slices.Sort(got)
			slices.Sort(tc.want)
			if !slices.Equal(got, tc.want) {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	tests := map[string]string{
		"widgets": "Widget", "policies": "Policy", "buses": "Bus", "classes": "Class",
		"patches": "Patch", "boxes": "Box", "ingress": "Ingress", "sheep": "Sheep",
	}
	for resource, want := range tests {
		if got := kindOf(resource); got != want {
			t.Errorf("kindOf(%q) = %q, want %q", resource, got, want)
		}
	}
}

// TestHoldProbes checks that every held kind gets synthetic objects of its
// own kind and group, and that the shipped rules know each kind they name.
func TestHoldProbes(t *testing.T) {
	kinds := []schema.GroupResource{{Group: "batch", Resource: "cronjobs"}, {Group: "s3.aws.upbound.io", Resource: "buckets"}}
	probes := holdProbes(kinds)
	want := map[string]int{"batch/v1 CronJob": 2, "s3.aws.upbound.io/v1 Bucket": 2}
	got := map[string]int{}
	for _, p := range probes {
		got[objectKind(p.object)]++
	}
	if len(got) != len(want) || got["batch/v1 CronJob"] != 2 || got["s3.aws.upbound.io/v1 Bucket"] != 2 {
		t.Errorf("probes by kind = %v, want %v", got, want)
	}
	for gr, known := range knownHeldKinds {
		k := known()
		group, _, _ := strings.Cut(k.apiVersion, "/")
		if group != gr.Group || !strings.HasPrefix(gr.Resource, strings.ToLower(k.kind)) {
			t.Errorf("%s makes %s %s", gr, k.apiVersion, k.kind)
		}
	}
}
