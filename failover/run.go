package failover

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cenkalti/backoff/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/authority/statemachine"
	"github.com/fencegate/fencegate/internal/rewatch"
)

// rewatchDelay is the pause before a watch that ended is opened again.
const rewatchDelay = 200 * time.Millisecond

// Cluster is one cluster of a failover: its kubeconfig context and a
// client of its API server.
type Cluster struct {
	Context string
	Client  client.WithWatch
}

// Options are those of one failover.
type Options struct {
	// Domain names the fence, and so the Fence objects.
	Domain string
	// To is the cluster to fail over to; From, if set, the old holder,
	// whose Fence is followed too while its API server answers.
	To   Cluster
	From *Cluster
	// Epoch, if not 0, is the epoch to ask for instead of one above the
	// holder's.
	Epoch uint64
	// MaxEpochStep is the fence authority's max epoch step (its
	// --max-epoch-step): an epoch further above the highest the Fences
	// show is refused before anything is patched (a *StepError). 0 means
	// the authority's default, statemachine.DefaultMaxEpochStep.
	MaxEpochStep uint64
	// Wait follows both Fences until the failover is done, refused or
	// Timeout has passed.
	Wait    bool
	Timeout time.Duration
	// QuiesceTimeout bounds how long Wait waits, once the failover is
	// done, for the old holder's held actuators to go quiet (its Fence's
	// Quiesced condition); 0 does not wait for it.
	QuiesceTimeout time.Duration
	// Out receives the timeline.
	Out io.Writer
	// Clock times the timeline; nil means the real clock.
	Clock clock.Clock
}

// TimeoutError ends a failover that was not done within the timeout; it
// says where things stand.
type TimeoutError struct {
	Timeout time.Duration
	// Standing says where each cluster stands.
	Standing string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the failover was not complete after %s; where things stand:\n%s", e.Timeout, e.Standing)
}

// QuiesceTimeoutError ends a failover that is done, but whose old holder's
// held actuators did not all go quiet within the quiesce timeout.
type QuiesceTimeoutError struct {
	Timeout time.Duration
	// Quiesced is the old holder's Quiesced condition: what still runs.
	Quiesced string
}

func (e *QuiesceTimeoutError) Error() string {
	return fmt.Sprintf("the failover is complete, but the old holder's held actuators had not all gone quiet after %s more: %s (see the runbook, \"A fenced cluster does not quiesce\")", e.Timeout, e.Quiesced)
}

// RefusedError ends a failover that cannot succeed as it is.
type RefusedError struct {
	Refused
	Standing string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the failover is refused: %s\n%s", e.Refused.Error(), e.Standing)
}

// Run fails over: see the package comment. It returns nil once the
// failover is done (or, without Wait, once spec.epoch is raised), a
// *StepError before patching anything when the authority would refuse the
// epoch's step, a *TimeoutError or a *RefusedError, ErrAlreadyHolding
// (wrapped) when there is nothing to do, or an error that says what
// failed.
func Run(ctx context.Context, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxEpochStep == 0 {
		opts.MaxEpochStep = statemachine.DefaultMaxEpochStep
	}
	r := &runner{opts: opts}
	return r.run(ctx)
}

type runner struct {
	opts  Options
	start time.Time
}

func (r *runner) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(r.opts.Out, format, args...)
}

func (r *runner) run(ctx context.Context) error {
	o := r.opts
	target, err := r.get(ctx, o.To)
	if err != nil {
		return err
	}
	var holder *fencegatev1alpha1.Fence
	if o.From != nil {
		if holder, err = r.get(ctx, *o.From); err != nil {
			r.printf("%s cannot be read (%v): the failover waits only for %s\n", o.From.Context, err, o.To.Context)
		}
	}
	plan, err := MakePlan(target, holder, o.Epoch)
	if err != nil {
		return err
	}
	if err := plan.CheckStep(o.MaxEpochStep); err != nil {
		return err
	}
	from := "the holder's side unchecked (no --from)"
	switch {
	case o.From != nil && holder != nil:
		from = "from " + o.From.Context
	case o.From != nil:
		from = "from " + o.From.Context + ", which cannot be read"
	}
	r.printf("failover of fence %q to %s (%s): %s is %s; the holder is %s at epoch %d\n",
		o.Domain, o.To.Context, from, o.To.Context, target.Status.State, plan.Holder, plan.HolderEpoch)

	r.start = o.Clock.Now()
	p := &Progress{Epoch: plan.Epoch, Generation: target.Generation, WithHolder: o.From != nil && holder != nil}
	if c := meta.FindStatusCondition(target.Status.Conditions, fencegatev1alpha1.ConditionEpochAccepted); c != nil && c.Status == metav1.ConditionFalse {
		p.StaleRefusal = c.Message
	}
	if plan.Patch {
		if p.Generation, err = r.raise(ctx, target, plan.Epoch); err != nil {
			return err
		}
		p.Raised = r.start
		r.event("epoch raised", "%s spec.epoch %s → %d (generation %d)", o.To.Context, specEpoch(target), plan.Epoch, p.Generation)
	} else {
		r.event("epoch asked for", "%s declares epoch %d already, above the holder's: nothing to raise", o.To.Context, target.Status.Epoch)
	}
	if !o.Wait {
		r.printf("spec.epoch is raised; follow the failover with: kubectl --context %s get fence %s -w (or run with --wait)\n", o.To.Context, o.Domain)
		return nil
	}
	return r.follow(ctx, p, target, holder)
}

// follow watches both Fences until the failover p is done, refused or out
// of time.
func (r *runner) follow(ctx context.Context, p *Progress, target, holder *fencegatev1alpha1.Fence) error {
	o := r.opts
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// deadline ends the failover's wait; once it is done, quiesce ends the
	// wait for the old holder to quiesce.
	deadline := o.Clock.NewTimer(o.Timeout)
	defer deadline.Stop()
	timeout := deadline.C()
	updates := make(chan update)
	go r.watch(ctx, "to", o.To, updates)
	if o.From != nil {
		go r.watch(ctx, "from", *o.From, updates)
	}
	targetLost := false
	var quiesce <-chan time.Time
	for {
		ob := p.Observe(target, holder)
		for _, s := range ob.Steps {
			r.event(s.Step.String(), "%s", s.Detail)
		}
		switch {
		case ob.Done && (ob.Quiesced || !p.WithHolder || o.QuiesceTimeout <= 0):
			summary := r.summary(target, p.WithHolder)
			if ob.Quiesced {
				summary += ", and its held actuators are quiet"
			}
			r.printf("failover complete in %s: %s\n", r.since(), summary)
			return nil
		case ob.Done && quiesce == nil:
			r.printf("   waiting up to %s for %s's held actuators to go quiet\n", o.QuiesceTimeout, o.From.Context)
			t := o.Clock.NewTimer(o.QuiesceTimeout)
			defer t.Stop()
			quiesce, timeout = t.C(), nil
		case ob.Refused != nil:
			return &RefusedError{Refused: *ob.Refused, Standing: r.standing(target, holder, p.WithHolder)}
		}
		select {
		case <-quiesce:
			return &QuiesceTimeoutError{Timeout: o.QuiesceTimeout, Quiesced: condition(holder, fencegatev1alpha1.ConditionQuiesced).Message}
		case <-timeout:
			return &TimeoutError{Timeout: o.Timeout, Standing: r.standing(target, holder, p.WithHolder)}
		case <-ctx.Done():
			return fmt.Errorf("failover interrupted: %w", context.Cause(ctx))
		case u := <-updates:
			switch {
			case u.err != nil && u.side == "from" && p.WithHolder:
				p.WithHolder = false
				r.printf("   lost %s (%v): waiting only for %s from now on\n", o.From.Context, u.err, o.To.Context)
			case u.err != nil:
				// The target's watch failed; it is opened again.
				if !targetLost {
					targetLost = true
					r.printf("   cannot watch %s (%v): trying again until the timeout\n", o.To.Context, u.err)
				}
			case u.side == "to":
				target, targetLost = u.fence, false
			default:
				holder = u.fence
			}
		}
	}
}

// update is a Fence seen by a watch, or its failure.
type update struct {
	side  string
	fence *fencegatev1alpha1.Fence
	err   error
}

// watch sends every version of c's Fence until ctx ends, opening the watch
// again when it ends; a failure to open it is sent too.
func (r *runner) watch(ctx context.Context, side string, c Cluster, updates chan<- update) {
	send := func(u update) bool {
		select {
		case updates <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	loop := rewatch.Loop{Backoff: backoff.NewConstantBackOff(rewatchDelay), Clock: r.opts.Clock}
	_ = loop.Run(ctx, func(ctx context.Context, _ func()) error {
		w, err := c.Client.Watch(ctx, &fencegatev1alpha1.FenceList{}, client.MatchingFields{"metadata.name": r.opts.Domain})
		if err != nil {
			return err
		}
		defer w.Stop()
		for ev := range w.ResultChan() {
			if f, ok := ev.Object.(*fencegatev1alpha1.Fence); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				if !send(update{side: side, fence: f}) {
					return ctx.Err()
				}
			}
		}
		return nil
	}, func(err error, _ bool, _ time.Duration) error {
		// A failure to open the watch is news; a watch that ended is
		// opened again quietly.
		if err != nil && !send(update{side: side, err: err}) {
			return ctx.Err()
		}
		return nil
	})
}

// get reads c's Fence.
func (r *runner) get(ctx context.Context, c Cluster) (*fencegatev1alpha1.Fence, error) {
	var f fencegatev1alpha1.Fence
	err := c.Client.Get(ctx, client.ObjectKey{Name: r.opts.Domain}, &f)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("context %s has no Fence %q: is fencegate (a version that keeps Fence objects) running there, for domain %q?", c.Context, r.opts.Domain, r.opts.Domain)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("context %s may not read Fence %q: bind your user or group to the chart's <release>-failover ClusterRole there: %w", c.Context, r.opts.Domain, err)
	case err != nil:
		return nil, fmt.Errorf("read Fence %q through context %s: %w", r.opts.Domain, c.Context, err)
	}
	return &f, nil
}

// raise patches the target's spec.epoch and returns the generation that
// asks for it.
func (r *runner) raise(ctx context.Context, target *fencegatev1alpha1.Fence, epoch uint64) (int64, error) {
	c := r.opts.To
	patch := fmt.Appendf(nil, `{"spec":{"epoch":%d}}`, epoch)
	f := target.DeepCopy()
	if err := c.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsForbidden(err) {
			return 0, fmt.Errorf("context %s may not patch Fence %q: bind your user or group to the chart's <release>-failover ClusterRole there: %w", c.Context, r.opts.Domain, err)
		}
		return 0, fmt.Errorf("raise spec.epoch of Fence %q through context %s to %d: %w", r.opts.Domain, c.Context, epoch, err)
	}
	return f.Generation, nil
}

// event prints one line of the timeline.
func (r *runner) event(what, format string, args ...any) {
	r.printf("  %9s  %-32s %s\n", "+"+r.since(), what, fmt.Sprintf(format, args...))
}

func (r *runner) since() string {
	return fmt.Sprintf("%.3fs", r.opts.Clock.Since(r.start).Seconds())
}

func (r *runner) summary(target *fencegatev1alpha1.Fence, withHolder bool) string {
	s := fmt.Sprintf("%s holds the fence of domain %q at epoch %d (token %d) and enforces it", r.opts.To.Context, r.opts.Domain, target.Status.Epoch, target.Status.Token)
	if withHolder {
		return s + fmt.Sprintf("; %s is fenced and enforces it", r.opts.From.Context)
	}
	if r.opts.From != nil {
		return s + fmt.Sprintf("; %s was not reachable, so whether it enforces being fenced is not known (it stops admitting when its lease ends)", r.opts.From.Context)
	}
	return s + "; the old holder was not checked (no --from)"
}

// standing says where each cluster stands.
func (r *runner) standing(target, holder *fencegatev1alpha1.Fence, withHolder bool) string {
	s := fmt.Sprintf("    %s: %s", r.opts.To.Context, describeStatus(target))
	switch {
	case withHolder && holder != nil:
		s += fmt.Sprintf("\n    %s: %s", r.opts.From.Context, describeStatus(holder))
	case r.opts.From != nil:
		s += fmt.Sprintf("\n    %s: unreachable", r.opts.From.Context)
	}
	return s
}

func specEpoch(f *fencegatev1alpha1.Fence) string {
	if f.Spec.Epoch == nil {
		return "unset"
	}
	return fmt.Sprint(*f.Spec.Epoch)
}
