// Package membership keeps the Leases that tell which fencegate processes
// of a fence domain run, much as client-go's leaderelection keeps a
// leader's: each process renews a Lease of its own (Lease), and the Fence's
// leader lists them, deletes the ones that ended and counts the rest
// (Sweep). The Fence's Enforced condition waits for every process that
// runs, and for no process that stopped.
//
// While its process holds the fence, a member's Lease also says until when
// (Hold): the proof of a live hold that package gate reads, which the
// Fence's status, written on change and not on heartbeats, cannot give.
package membership

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelDomain labels each process's Lease with the fence domain it is a
// member of, so that the leader lists the Leases of its domain only.
const LabelDomain = "fencegate.dev/fence-domain"

// The annotations of a member's Lease while its process holds the fence.
const (
	// AnnotationHoldToken is the fencing token the process holds the
	// fence with, in decimal.
	AnnotationHoldToken = "fencegate.dev/hold-token"
	// AnnotationHoldValidUntil is when (RFC 3339, UTC) the process stops
	// acting as holder unless the authority renews its lease first: its
	// agent's end of validity, a lease margin before the authority may
	// hand the fence to another cluster.
	AnnotationHoldValidUntil = "fencegate.dev/hold-valid-until"
)

// Hold is what a member's Lease says of its process's hold of the fence.
type Hold struct {
	// Token is the fencing token the process holds the fence with.
	Token int64
	// ValidUntil is when its hold ends without a renewal by the authority.
	ValidUntil time.Time
}

// HoldOf reads the hold a Lease carries; false when it carries none, or
// annotations that are not one (a hold that cannot be read is no hold).
func HoldOf(l *coordinationv1.Lease) (Hold, bool) {
	token, err := strconv.ParseInt(l.Annotations[AnnotationHoldToken], 10, 64)
	if err != nil || token <= 0 {
		return Hold{}, false
	}
	until, err := time.Parse(time.RFC3339Nano, l.Annotations[AnnotationHoldValidUntil])
	if err != nil {
		return Hold{}, false
	}
	return Hold{Token: token, ValidUntil: until}, true
}

// annotations are h's annotations; none for the zero Hold.
func (h Hold) annotations() map[string]string {
	if h.Token == 0 {
		return nil
	}
	return map[string]string{
		AnnotationHoldToken:      strconv.FormatInt(h.Token, 10),
		AnnotationHoldValidUntil: h.ValidUntil.UTC().Format(time.RFC3339Nano),
	}
}

// DefaultDuration is how long a member's Lease lasts without renewal: a
// process that is gone holds Enforced back no longer than that.
const DefaultDuration = 15 * time.Second

// CheckDuration checks the duration of a member's Lease: it is renewed every
// third of it, at least every second.
func CheckDuration(d time.Duration) error {
	if d < 3*time.Second {
		return fmt.Errorf("lease duration %s is too short: the Lease is renewed every third of it; use at least 3s", d)
	}
	return nil
}

// Config names a domain's members and where their Leases are.
type Config struct {
	// Client reads and writes the Leases.
	Client client.Client
	// Namespace holds the Leases.
	Namespace string
	// Domain is the fence domain.
	Domain string
	// Instance is this process's name within its cluster.
	Instance string
	// Duration is how long a Lease lasts without renewal.
	Duration time.Duration
	// Clock dates the renewals.
	Clock clock.PassiveClock
}

// Lease is this process's Lease; only one goroutine uses it.
type Lease struct {
	cfg Config
	// lease is the Lease as last written; nil until made.
	lease *coordinationv1.Lease
	// hold is the hold the Lease is to carry; the zero Hold for none.
	hold Hold
}

// NewLease returns this process's Lease, not made yet.
func NewLease(cfg Config) *Lease { return &Lease{cfg: cfg} }

// RenewInterval is how often the Lease is to be renewed: every third of its
// duration.
func (l *Lease) RenewInterval() time.Duration { return l.cfg.Duration / 3 }

// Renew makes the Lease, or renews it, and reports whether it made it. A
// Lease that is gone (the leader deleted it after it ended: this process
// stalled) is made anew; what the leader pruned with it (the process's entry
// of the Fence status) is then to be written again.
func (l *Lease) Renew(ctx context.Context) (made bool, err error) {
	made, _, err = l.write(ctx)
	return made, err
}

// SetHold writes the hold the Lease carries (the zero Hold: none) and
// renews it. The error is set unless the API server has taken it: a hold
// withdrawn is then known to be withdrawn.
func (l *Lease) SetHold(ctx context.Context, h Hold) error {
	l.hold = h
	// A write that met someone else's first takes their version, and the
	// second writes.
	for range 2 {
		_, written, err := l.write(ctx)
		if err != nil || written {
			return err
		}
	}
	return fmt.Errorf("write the hold of Lease %s/%s: it changed under every write", l.cfg.Namespace, leaseName(l.cfg.Domain, l.cfg.Instance))
}

// write makes or renews the Lease with the hold it is to carry; written
// says whether the API server took it (not when the Lease changed under it:
// it then takes the Lease's version, and writes next time).
func (l *Lease) write(ctx context.Context) (made, written bool, err error) {
	c := l.cfg.Client
	now := metav1.NewMicroTime(l.cfg.Clock.Now())
	if l.lease != nil {
		l.lease.Spec.RenewTime = &now
		l.lease.Annotations = withHold(l.lease.Annotations, l.hold)
		err := c.Update(ctx, l.lease)
		if apierrors.IsConflict(err) {
			// Someone else wrote it, or made it again (take its version
			// and UID, renew next time), or it is gone: an update of a
			// deleted object fails its UID precondition with a conflict,
			// not as not found.
			var fresh coordinationv1.Lease
			if err = c.Get(ctx, client.ObjectKeyFromObject(l.lease), &fresh); err == nil {
				l.lease.UID, l.lease.ResourceVersion = fresh.UID, fresh.ResourceVersion
				return false, false, nil
			}
		}
		switch {
		case err == nil:
			return false, true, nil
		case !apierrors.IsNotFound(err):
			return false, false, fmt.Errorf("renew the Lease %s/%s: %w", l.lease.Namespace, l.lease.Name, err)
		}
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: l.cfg.Namespace, Name: leaseName(l.cfg.Domain, l.cfg.Instance),
			Labels: map[string]string{LabelDomain: l.cfg.Domain}, Annotations: l.hold.annotations(),
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(l.cfg.Instance),
			LeaseDurationSeconds: ptr.To(int32(l.cfg.Duration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	err = c.Create(ctx, lease)
	if apierrors.IsAlreadyExists(err) {
		// Left by an earlier run under the same instance name.
		var old coordinationv1.Lease
		if err = c.Get(ctx, client.ObjectKeyFromObject(lease), &old); err == nil {
			lease.ResourceVersion = old.ResourceVersion
			err = c.Update(ctx, lease)
		}
	}
	if err != nil {
		return false, false, fmt.Errorf("make the Lease %s/%s: %w", lease.Namespace, lease.Name, err)
	}
	l.lease = lease
	return true, true, nil
}

// withHold is annotations with the hold annotations of h, and without them
// for the zero Hold; the others stay.
func withHold(annotations map[string]string, h Hold) map[string]string {
	out := maps.Clone(annotations)
	delete(out, AnnotationHoldToken)
	delete(out, AnnotationHoldValidUntil)
	for k, v := range h.annotations() {
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// Release deletes the Lease, if it was made, so that the leader does not
// wait for a process that stopped.
func (l *Lease) Release(ctx context.Context) error {
	if l.lease == nil {
		return nil
	}
	if err := client.IgnoreNotFound(l.cfg.Client.Delete(ctx, l.lease)); err != nil {
		return fmt.Errorf("delete the Lease %s/%s: %w", l.lease.Namespace, l.lease.Name, err)
	}
	l.lease = nil
	return nil
}

// Roster is who of a domain runs, as Sweep found it.
type Roster struct {
	// Live names the processes whose Lease has not ended, sorted; the one
	// that swept is always among them. It is nil when the Leases could not
	// be listed: then no process is known to run or to be gone.
	Live []string
	// NextEnd is when the first of their Leases ends without renewal; zero
	// for none.
	NextEnd time.Time
	// Ended names the processes whose ended Lease Sweep deleted.
	Ended []string
}

// Sweep lists the domain's Leases, deletes those that ended (but the
// sweeper's own: it runs) and returns the roster. The error is set when the
// Leases cannot be listed (the roster is then empty) or an ended Lease
// cannot be deleted (the roster holds).
func Sweep(ctx context.Context, cfg Config) (Roster, error) {
	var leases coordinationv1.LeaseList
	if err := cfg.Client.List(ctx, &leases, client.InNamespace(cfg.Namespace), client.MatchingLabels{LabelDomain: cfg.Domain}); err != nil {
		return Roster{}, fmt.Errorf("list the Leases of domain %s in %s: %w", cfg.Domain, cfg.Namespace, err)
	}
	roster := Roster{Live: []string{cfg.Instance}}
	now := cfg.Clock.Now()
	var errs []error
	for i := range leases.Items {
		l := &leases.Items[i]
		name := ptr.Deref(l.Spec.HolderIdentity, "")
		if ends, ok := leaseEnd(l); ok && ends.After(now) {
			roster.Live = append(roster.Live, name)
			if roster.NextEnd.IsZero() || ends.Before(roster.NextEnd) {
				roster.NextEnd = ends
			}
			continue
		}
		if name == cfg.Instance {
			continue
		}
		// Ended: its process stopped renewing. The precondition keeps a
		// renewal that just came in.
		err := cfg.Client.Delete(ctx, l, client.Preconditions{ResourceVersion: ptr.To(l.ResourceVersion)})
		switch {
		case err == nil:
			roster.Ended = append(roster.Ended, name)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("delete the ended Lease %s/%s: %w", l.Namespace, l.Name, err))
		}
	}
	slices.Sort(roster.Live)
	roster.Live = slices.Compact(roster.Live)
	return roster, errors.Join(errs...)
}

// leaseEnd is when a Lease ends without renewal.
func leaseEnd(l *coordinationv1.Lease) (time.Time, bool) {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	return l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second), true
}

// leaseName is the name of a process's Lease: the domain and the instance
// name where they make a valid object name, or a digest of the instance
// name otherwise (an instance is any string without spaces).
func leaseName(domain, instance string) string {
	prefix := "fencegate-" + domain + "-"
	if name := prefix + instance; len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return prefix + Digest(instance)
}

// Digest is a short stable name for s, for the names built from an
// instance's that would be too long or invalid with it whole.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:10])
}
