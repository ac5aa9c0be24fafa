package statemachine

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCheckBinding: a UID that joins a domain is bound to the name any
// other domain records it under (case 1, PermissionDenied), so that a
// cluster cannot squat another cluster's UID in a domain the other has
// not joined yet; a UID no domain records is bound by its first
// declaration.
func TestCheckBinding(t *testing.T) {
	tests := map[string]struct {
		id       Identity
		recorded map[string]string
		want     *BindingError
	}{
		"1: a uid no domain records is free (first come)": {id: east},
		"1: a uid recorded under the declared name in other domains joins": {
			id: east, recorded: map[string]string{"payments": "east", "search": "east"},
		},
		"1: another cluster's uid, recorded in a domain the declared one is not, is refused": {
			id:       Identity{Name: "east", UID: west.UID},
			recorded: map[string]string{"payments": "west"},
			want:     &BindingError{UID: west.UID, Declared: "east", Bound: "west", Domains: []string{"payments"}},
		},
		"1: the refusal names every domain that binds the uid, in order": {
			id:       Identity{Name: "east", UID: west.UID},
			recorded: map[string]string{"search": "west", "default": "west", "payments": "east"},
			want:     &BindingError{UID: west.UID, Declared: "east", Bound: "west", Domains: []string{"default", "search"}},
		},
		"1: older records that disagree: the first domain's name is the one named": {
			id:       Identity{Name: "north", UID: west.UID},
			recorded: map[string]string{"b": "west", "a": "west-old", "c": "west"},
			want:     &BindingError{UID: west.UID, Declared: "north", Bound: "west-old", Domains: []string{"a"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := CheckBinding(tc.id, tc.recorded)
			var got *BindingError
			if err != nil && !errors.As(err, &got) {
				t.Fatalf("CheckBinding: %v (%T), want a *BindingError or nil", err, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("CheckBinding (-want +got):\n%s", diff)
			}
		})
	}
}
