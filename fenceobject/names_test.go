package fenceobject

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fenceobject/membership"
)

func TestInstanceFieldManager(t *testing.T) {
	long := strings.Repeat("p", 240)
	tests := map[string]struct {
		instance string
		want     string
	}{
		"a pod name":                  {instance: "fg-fencegate-7d9c-x2b4q", want: "fencegate-instance/fg-fencegate-7d9c-x2b4q"},
		"not an object name":          {instance: "Host_1-abcde", want: "fencegate-instance/Host_1-abcde"},
		"longer than a field manager": {instance: long, want: "fencegate-instance/" + membership.Digest(long)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := instanceFieldManager(tc.instance)
			if len(got) > maxFieldManager {
				t.Errorf("field manager %q is longer than %d", got, maxFieldManager)
			}
			if got != tc.want {
				t.Errorf("field manager %q, want %q", got, tc.want)
			}
			if instanceFieldManager(tc.instance+"x") == got {
				t.Error("two instances share a field manager")
			}
		})
	}
}
