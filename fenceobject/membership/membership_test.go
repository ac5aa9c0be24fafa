package membership

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/test/cluster"
)

func TestLeaseName(t *testing.T) {
	tests := map[string]struct {
		instance string
		// want is the name; "" for one made of a digest.
		want string
	}{
		"a pod name":                {instance: "fg-fencegate-7d9c-x2b4q", want: "fencegate-default-fg-fencegate-7d9c-x2b4q"},
		"not an object name":        {instance: "Host_1-abcde"},
		"longer than an object's":   {instance: strings.Repeat("p", 240)},
		"a digest-sized pod name":   {instance: "0123456789abcdef0123", want: "fencegate-default-0123456789abcdef0123"},
		"upper case is no DNS name": {instance: "EAST"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := leaseName("default", tc.instance)
			if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 {
				t.Errorf("lease name %q is not an object name: %v", got, msgs)
			}
			want := tc.want
			if want == "" {
				want = "fencegate-default-" + Digest(tc.instance)
			}
			if got != want {
				t.Errorf("lease name %q, want %q", got, want)
			}
			if leaseName("default", tc.instance+"x") == got {
				t.Error("two instances share a Lease")
			}
		})
	}
}

func TestCheckDuration(t *testing.T) {
	for d, ok := range map[time.Duration]bool{time.Second: false, 2999 * time.Millisecond: false, 3 * time.Second: true, DefaultDuration: true} {
		if err := CheckDuration(d); (err == nil) != ok {
			t.Errorf("CheckDuration(%s) = %v, want ok %t", d, err, ok)
		}
	}
}

// TestMembers: on a real API server, processes renew their Leases, and a
// sweep counts those that run, deletes those that ended (never the
// sweeper's own), and a member whose Lease was deleted makes it anew.
func TestMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "membership"})
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	config := func(domain, instance string) Config {
		return Config{Client: cp.Client, Namespace: "default", Domain: domain, Instance: instance, Duration: 15 * time.Second, Clock: clk}
	}
	renew := func(l *Lease, wantMade bool) {
		t.Helper()
		made, err := l.Renew(ctx)
		if err != nil || made != wantMade {
			t.Fatalf("Renew = %t, %v; want made %t", made, err, wantMade)
		}
	}
	a, b, c := NewLease(config("payments", "a")), NewLease(config("payments", "b")), NewLease(config("payments", "c"))
	other := NewLease(config("search", "x"))
	if got := a.RenewInterval(); got != 5*time.Second {
		t.Errorf("RenewInterval %s, want a third of 15s", got)
	}
	for _, l := range []*Lease{a, b, c, other} {
		renew(l, true)
	}
	// b stops renewing; a and c go on until b's Lease has ended.
	clk.Step(10 * time.Second)
	renew(a, false)
	renew(c, false)
	clk.Step(6 * time.Second)

	steps := []struct {
		name    string
		sweeper string
		want    Roster
	}{
		{"b ended and is deleted", "a", Roster{Live: []string{"a", "c"}, NextEnd: start.Add(25 * time.Second), Ended: []string{"b"}}},
		{"a sweep again finds nothing more to delete", "c", Roster{Live: []string{"a", "c"}, NextEnd: start.Add(25 * time.Second)}},
	}
	for _, step := range steps {
		got, err := Sweep(ctx, config("payments", step.sweeper))
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if !slices.Equal(got.Live, step.want.Live) || !got.NextEnd.Equal(step.want.NextEnd) || !slices.Equal(got.Ended, step.want.Ended) {
			t.Errorf("%s: roster %+v, want %+v", step.name, got, step.want)
		}
	}
	var gone coordinationv1.Lease
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: leaseName("payments", "b")}, &gone); !apierrors.IsNotFound(err) {
		t.Errorf("b's ended Lease: %v, want it deleted", err)
	}
	// b comes back: its Lease is made anew, and it counts again.
	renew(b, true)
	if got, err := Sweep(ctx, config("payments", "a")); err != nil || !slices.Equal(got.Live, []string{"a", "b", "c"}) {
		t.Errorf("after b came back: %+v, %v", got, err)
	}
	// A sweeper whose own Lease ended still runs, and keeps its Lease.
	clk.Step(time.Minute)
	if got, err := Sweep(ctx, config("payments", "a")); err != nil || !slices.Equal(got.Live, []string{"a"}) || !slices.Equal(got.Ended, []string{"b", "c"}) {
		t.Errorf("a minute later: %+v, %v; want a alone, b and c ended", got, err)
	}
	// Another domain's members are never counted or deleted.
	if got, err := Sweep(ctx, config("search", "y")); err != nil || !slices.Equal(got.Live, []string{"y"}) || !slices.Equal(got.Ended, []string{"x"}) {
		t.Errorf("domain search: %+v, %v; want x ended", got, err)
	}
	// Released, the Lease is gone, and releasing again is no error.
	for range 2 {
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: leaseName("payments", "a")}, &gone); !apierrors.IsNotFound(err) {
		t.Errorf("a's released Lease: %v, want it deleted", err)
	}
}

// TestHolds: on a real API server, a Lease carries the hold set on it
// through renewals and writes made under it by others, drops it when it is
// withdrawn, and keeps the annotations that are not its own.
func TestHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "membership-holds"})
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	l := NewLease(Config{Client: cp.Client, Namespace: "default", Domain: "payments", Instance: "a", Duration: 15 * time.Second, Clock: clk})
	key := client.ObjectKey{Namespace: "default", Name: leaseName("payments", "a")}
	stored := func() (Hold, bool) {
		t.Helper()
		var got coordinationv1.Lease
		if err := cp.Client.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		if got.Annotations["team"] != "" && got.Annotations["team"] != "payments" {
			t.Fatalf("another's annotation changed: %v", got.Annotations)
		}
		return HoldOf(&got)
	}
	hold := Hold{Token: 42, ValidUntil: clk.Now().Add(9 * time.Second)}
	steps := []struct {
		name   string
		do     func() error
		want   Hold
		wantOK bool
	}{
		{"a hold set before the Lease is made", func() error { return l.SetHold(ctx, hold) }, hold, true},
		{"kept by a renewal", func() error { _, err := l.Renew(ctx); return err }, hold, true},
		{"written over another's write", func() error {
			var other coordinationv1.Lease
			if err := cp.Client.Get(ctx, key, &other); err != nil {
				return err
			}
			other.Annotations["team"] = "payments"
			if err := cp.Client.Update(ctx, &other); err != nil {
				return err
			}
			hold.ValidUntil = hold.ValidUntil.Add(4 * time.Second)
			return l.SetHold(ctx, hold)
		}, Hold{Token: 42, ValidUntil: clk.Now().Add(13 * time.Second)}, true},
		{"withdrawn", func() error { return l.SetHold(ctx, Hold{}) }, Hold{}, false},
		{"still none after a renewal", func() error { _, err := l.Renew(ctx); return err }, Hold{}, false},
	}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got, ok := stored()
		if ok != step.wantOK || got.Token != step.want.Token || !got.ValidUntil.Equal(step.want.ValidUntil) {
			t.Errorf("%s: stored hold %+v (%t), want %+v (%t)", step.name, got, ok, step.want, step.wantOK)
		}
	}
}

func TestHoldOf(t *testing.T) {
	until := "2030-01-02T03:04:05.5Z"
	tests := map[string]struct {
		annotations map[string]string
		wantOK      bool
	}{
		"a hold":         {map[string]string{AnnotationHoldToken: "42", AnnotationHoldValidUntil: until}, true},
		"no annotations": {nil, false},
		"no end":         {map[string]string{AnnotationHoldToken: "42"}, false},
		"no token":       {map[string]string{AnnotationHoldValidUntil: until}, false},
		"a bad token":    {map[string]string{AnnotationHoldToken: "4x", AnnotationHoldValidUntil: until}, false},
		"token zero":     {map[string]string{AnnotationHoldToken: "0", AnnotationHoldValidUntil: until}, false},
		"a bad end":      {map[string]string{AnnotationHoldToken: "42", AnnotationHoldValidUntil: "soon"}, false},
	}
	for name, tc := range tests {
		l := &coordinationv1.Lease{}
		l.Annotations = tc.annotations
		h, ok := HoldOf(l)
		if ok != tc.wantOK || (ok && (h.Token != 42 || h.ValidUntil.Format(time.RFC3339Nano) != until)) {
			t.Errorf("%s: HoldOf = %+v, %t; want ok %t", name, h, ok, tc.wantOK)
		}
	}
}
