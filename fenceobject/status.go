package fenceobject

import (
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/internal/ssa"
)

// Timing of the leader's status writes.
const (
	// authorityTimeout bounds the GetFence asked on each change of the
	// fence state.
	authorityTimeout = 2 * time.Second
	// countsInterval spaces the writes that change nothing but the
	// Components' counts: creating many Components does not write the
	// Fence once per Component.
	countsInterval = time.Second
	// retryInterval is when a sync that failed somewhere is tried again
	// without waiting for an event.
	retryInterval = 2 * time.Second
)

// statusWriter is the state of the leader's Status runnable; only its
// goroutine uses it.
type statusWriter struct {
	k *Keeper
	// asked is the fence state whose GetFence answer view is.
	asked    *fencestate.Key
	view     *AuthorityView
	lastSave time.Time
	// enforcedKey is the state Enforced was last True for.
	enforcedKey *fencestate.Key
	// seenTarget is the epoch asked for when last looked at; raisedAt is
	// when it last rose, until the failover to it completes.
	seenTarget uint64
	raisedAt   time.Time
	failing    map[string]bool
	// failed is set when something failed in the current sync.
	failed bool
}

func (k *Keeper) runStatus(ctx context.Context) error {
	changes := k.opts.Fence.Subscribe()
	if err := k.watchFence(ctx); err != nil {
		return err
	}
	events := k.events.status
	if err := k.watch(ctx, &coordinationv1.Lease{}, events); err != nil {
		return err
	}
	s := &statusWriter{k: k, failing: map[string]bool{}}
	var holdChanges <-chan struct{}
	if k.opts.Holds != nil {
		holdChanges = k.opts.Holds.Changes(k.opts.Domain)
	}
	var timer clock.Timer
	for {
		s.failed = false
		wake := s.sync(ctx)
		if s.failed {
			wake = earliest(wake, k.opts.Clock.Now().Add(retryInterval))
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		var fire <-chan time.Time
		if !wake.IsZero() {
			timer = k.opts.Clock.NewTimer(max(wake.Sub(k.opts.Clock.Now()), 0))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case <-events:
		case <-changes:
		case <-k.opts.Marks.Changes():
		case <-holdChanges:
		case <-fire:
		}
	}
}

// sync derives the status and writes it when it changed. It returns when
// to look again without an event (an instance's Lease ending, a deferred
// write); zero for no such time.
func (s *statusWriter) sync(ctx context.Context) time.Time {
	o := s.k.opts
	var f fencegatev1alpha1.Fence
	if err := o.Client.Get(ctx, client.ObjectKey{Name: o.Domain}, &f); err != nil {
		// Missing: the instances create it, and its creation is an event.
		s.report("read the Fence", client.IgnoreNotFound(err))
		return time.Time{}
	}
	state, ok := o.Fence.Fence()
	if !ok {
		return time.Time{}
	}
	key := state.Key()
	if s.asked == nil || *s.asked != key {
		s.view = s.askAuthority(ctx, state)
		s.asked = &key
	}
	now := o.Clock.Now()
	live, wake := s.pruneGoneInstances(ctx, &f)
	message := state.Message
	if d, err := o.Policy.Reconcile(ctx, o.Domain, map[string]any{}); s.report("ask the policies for the fence's message", err) {
		message = d.Message
	}
	target := TargetEpoch(o.FloorEpoch, &f)
	var holds *hold.Progress
	if o.Holds != nil {
		p := o.Holds.Progress(o.Domain)
		holds = &p
	}
	desired := Desired(f.Status, Inputs{
		State: state, Message: message, TargetEpoch: target, Generation: f.Generation,
		Authority: s.view, Live: live, Marks: o.Marks.Progress(), Holds: holds, Now: now,
	})

	current := f.Status
	current.Instances = nil
	applied := appliesStatus(&f, StatusFieldManager)
	if !applied || !equality.Semantic.DeepEqual(current, desired) {
		countsOnly := desired
		countsOnly.Components = current.Components
		countsOnly.Held = current.Held
		if due := s.lastSave.Add(countsInterval); applied && equality.Semantic.DeepEqual(current, countsOnly) && now.Before(due) {
			wake = earliest(wake, due)
		} else if s.report("apply the Fence status", s.k.applyStatus(ctx, &desired, StatusFieldManager)) {
			s.lastSave = now
		}
	}
	if applied && appliesStatus(&f, formerStatusFieldManager) {
		// The leader applied the status under the Component controller's
		// field manager before: once StatusFieldManager owns what it
		// sends, applying nothing as the former manager removes the fields
		// only that one still owns, those no longer sent.
		s.report("release the former field manager's status fields", s.k.applyStatus(ctx, nil, formerStatusFieldManager))
	}
	s.observe(state.Cluster.Epoch, target, desired)
	return wake
}

// observe logs when Enforced becomes True and times the failover that a
// raised spec.epoch asked for.
func (s *statusWriter) observe(epoch, target uint64, st fencegatev1alpha1.ClusterFenceStatus) {
	o := s.k.opts
	switch {
	case s.seenTarget == 0:
		s.seenTarget = target
	case target > s.seenTarget:
		s.seenTarget, s.raisedAt = target, o.Clock.Now()
	}
	holding := meta.IsStatusConditionTrue(st.Conditions, fencegatev1alpha1.ConditionHolding)
	enforced := meta.IsStatusConditionTrue(st.Conditions, fencegatev1alpha1.ConditionEnforced)
	key := fencestate.Key{}
	if s.asked != nil {
		key = *s.asked
	}
	if enforced && (s.enforcedKey == nil || *s.enforcedKey != key) {
		s.enforcedKey = &key
		o.Logger.Info("fence state enforced", "fence", o.Domain, "state", st.State, "epoch", st.Epoch, "token", st.Token, "components", ptr.Deref(st.Components, fencegatev1alpha1.FenceComponents{}).Summary)
	}
	if !s.raisedAt.IsZero() && holding && enforced && epoch >= s.seenTarget {
		took := o.Clock.Since(s.raisedAt)
		s.k.metrics.failover.Observe(took.Seconds())
		o.Logger.Info("failover to this cluster complete: holding and enforced", "fence", o.Domain, "epoch", epoch, "took", took.String())
		s.raisedAt = time.Time{}
	}
}

// askAuthority asks the authority for a pending takeover; nil when it
// cannot tell. A holder has none to ask about: a takeover by a higher epoch
// would have fenced it, and one at or below its epoch is dropped when it
// renews, so the failover's last step does not wait for the call.
func (s *statusWriter) askAuthority(ctx context.Context, state fencestate.State) *AuthorityView {
	if state.Status == fencestate.Active {
		return &AuthorityView{}
	}
	o := s.k.opts
	ctx, cancel := context.WithTimeout(ctx, authorityTimeout)
	defer cancel()
	resp, err := o.Authority.GetFence(ctx, &fencev1.GetFenceRequest{Domain: o.Domain})
	if !s.report("ask the authority for a pending takeover", err) {
		return nil
	}
	f := resp.GetFence()
	view := &AuthorityView{}
	if p := f.GetPending(); p != nil {
		view.Pending = &fencegatev1alpha1.FenceCluster{Name: p.GetClusterName(), UID: p.GetClusterUid(), Epoch: int64(p.GetEpoch())} //nolint:gosec // epochs are far below 2^63
		if t := f.GetHolder().GetLeaseExpireTime(); t != nil {
			view.LeaseExpiresAt = t.AsTime()
		}
	}
	return view
}

// pruneGoneInstances deletes the Leases and prunes the entries of the
// instances that no longer run (their Lease ended), and returns the names
// of those that run (this one always does) and when the first running
// Lease ends.
func (s *statusWriter) pruneGoneInstances(ctx context.Context, f *fencegatev1alpha1.Fence) ([]string, time.Time) {
	o := s.k.opts
	roster, err := membership.Sweep(ctx, s.k.membership())
	for _, name := range roster.Ended {
		o.Logger.Info("fence object: instance gone, its Lease ended", "fence", o.Domain, "instance", name)
	}
	if !s.report("sweep the instances' Leases", err) && roster.Live == nil {
		// Without Leases no entry is known to be gone: keep them all.
		names := []string{o.Instance}
		for _, e := range f.Status.Instances {
			names = append(names, e.Name)
		}
		slices.Sort(names)
		return slices.Compact(names), time.Time{}
	}
	s.report("prune the entries of gone instances", s.prune(ctx, f, roster.Live))
	return roster.Live, roster.NextEnd
}

// prune removes the entries of instances that do not run, in one JSON patch
// that first tests each entry's name, so that a list that changed since it
// was read fails the patch instead of losing another entry.
func (s *statusWriter) prune(ctx context.Context, f *fencegatev1alpha1.Fence, live []string) error {
	var gone []ssa.Item
	for i, e := range f.Status.Instances {
		if !slices.Contains(live, e.Name) {
			gone = append(gone, ssa.Item{Index: i, Key: e.Name})
		}
	}
	if err := ssa.RemoveListItems(ctx, s.k.opts.Client, f, "/status/instances", "name", gone, StatusFieldManager); err != nil {
		return fmt.Errorf("prune the entries of gone instances: %w", err)
	}
	return nil
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// report logs err once until what failed works again, and says whether it
// worked.
func (s *statusWriter) report(what string, err error) bool {
	if err != nil {
		s.failed = true
	}
	return reportOnce(s.k.opts, s.failing, what, err)
}

// appliesStatus reports whether manager applied some of f's status.
func appliesStatus(f *fencegatev1alpha1.Fence, manager string) bool {
	return slices.ContainsFunc(f.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "status"
	})
}
