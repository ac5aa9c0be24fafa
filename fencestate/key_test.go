package fencestate_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fencestate"
)

func TestKey(t *testing.T) {
	west := fencestate.Cluster{Name: "west", UID: "uid-west", Epoch: 2}
	tests := map[string]struct {
		state fencestate.State
		// want is the key's String, ref its HolderRef.
		want, ref string
	}{
		"active": {
			state: fencestate.State{Status: fencestate.Active, Cluster: west, Holder: west, Token: 42, ValidUntilNS: 5, Reason: "x"},
			want:  "active at epoch 2, holder west@2, token 42", ref: "west@2",
		},
		"fenced": {
			state: fencestate.State{Status: fencestate.Fenced, Cluster: fencestate.Cluster{Name: "east", Epoch: 1}, Holder: west},
			want:  "fenced at epoch 1, holder west@2", ref: "west@2",
		},
		"no holder known": {
			state: fencestate.State{Status: fencestate.Unknown, Cluster: fencestate.Cluster{Name: "east", Epoch: 1}},
			want:  "unknown at epoch 1",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			k := tc.state.Key()
			if got := k.String(); got != tc.want {
				t.Errorf("String %q, want %q", got, tc.want)
			}
			if got := k.HolderRef(); got != tc.ref {
				t.Errorf("HolderRef %q, want %q", got, tc.ref)
			}
			back := fencestate.Key{Status: k.Status, Epoch: k.Epoch, Token: k.Token, Holder: "stale", HolderEpoch: 9}
			if err := back.ParseHolderRef(k.HolderRef()); err != nil || back != k {
				t.Errorf("ParseHolderRef(%q): %+v, %v; want %+v", k.HolderRef(), back, err, k)
			}
		})
	}
}

func TestKeyIgnoresWhatOnlyTimesOrExplainsAState(t *testing.T) {
	a := fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Name: "west", Epoch: 2}, Token: 7}
	b := a
	b.ValidUntilNS, b.LastSuccessNS, b.Reason, b.Message, b.ClusterGeneration = 1, 2, "r", "m", 3
	if a.Key() != b.Key() {
		t.Errorf("keys %+v and %+v differ", a.Key(), b.Key())
	}
	b.Token = 8
	if a.Key() == b.Key() {
		t.Error("a new token makes the same key")
	}
}

func TestParseHolderRefErrors(t *testing.T) {
	for ref, want := range map[string]string{
		"west":    "want NAME@EPOCH",
		"@2":      "want NAME@EPOCH",
		"west@x":  "the epoch",
		"west@-1": "the epoch",
	} {
		var k fencestate.Key
		if err := k.ParseHolderRef(ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseHolderRef(%q): %v, want an error with %q", ref, err, want)
		}
	}
}

func TestClusterDescribe(t *testing.T) {
	for want, c := range map[string]fencestate.Cluster{
		"west (epoch 8)":     {Name: "west", UID: "u", Epoch: 8},
		"west":               {Name: "west"},
		"uid u-1 (epoch 2)":  {UID: "u-1", Epoch: 2},
		"an unnamed cluster": {Epoch: 3},
	} {
		if got := c.Describe(); got != want {
			t.Errorf("%+v: %q, want %q", c, got, want)
		}
	}
}
