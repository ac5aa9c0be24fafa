package fenceobject

import (
	"strings"
	"testing"
	"time"
)

// TestOptionsAreChecked: every missing piece and a lease too short to renew
// are reported at once.
func TestOptionsAreChecked(t *testing.T) {
	_, err := Options{LeaseDuration: time.Second}.withDefaults()
	for _, want := range []string{
		"no Kubernetes client or cache",
		"no fence state or agent",
		"no authority client, policy or marks",
		`domain "", namespace "" and instance "" must all be set`,
		"lease duration 1s is too short",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
