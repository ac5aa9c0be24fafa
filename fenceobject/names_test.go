package fenceobject

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNames(t *testing.T) {
	long := strings.Repeat("p", 240)
	tests := map[string]struct {
		instance     string
		lease        string
		manager      string
		leaseDigest  bool
		managerShort bool
	}{
		"a pod name":                  {instance: "fg-fencegate-7d9c-x2b4q", lease: "fencegate-default-fg-fencegate-7d9c-x2b4q", manager: "fencegate-instance/fg-fencegate-7d9c-x2b4q"},
		"not an object name":          {instance: "Host_1-abcde", leaseDigest: true, manager: "fencegate-instance/Host_1-abcde"},
		"longer than a field manager": {instance: long, leaseDigest: true, managerShort: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lease, manager := leaseName("default", tc.instance), instanceFieldManager(tc.instance)
			if msgs := validation.IsDNS1123Subdomain(lease); len(msgs) > 0 {
				t.Errorf("lease name %q is not an object name: %v", lease, msgs)
			}
			if len(manager) > maxFieldManager {
				t.Errorf("field manager %q is longer than %d", manager, maxFieldManager)
			}
			switch {
			case tc.leaseDigest && lease != "fencegate-default-"+digest(tc.instance):
				t.Errorf("lease name %q, want one made of a digest", lease)
			case !tc.leaseDigest && lease != tc.lease:
				t.Errorf("lease name %q, want %q", lease, tc.lease)
			}
			switch {
			case tc.managerShort && manager != "fencegate-instance/"+digest(tc.instance):
				t.Errorf("field manager %q, want one made of a digest", manager)
			case !tc.managerShort && manager != tc.manager:
				t.Errorf("field manager %q, want %q", manager, tc.manager)
			}
			if leaseName("default", tc.instance+"x") == lease || instanceFieldManager(tc.instance+"x") == manager {
				t.Error("two instances share a name")
			}
		})
	}
}
