package fenceagent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/codes"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

// maxInFlight bounds the declarations running at once: a watch event starts
// one at once even while a slow heartbeat is pending, but a flood of events
// cannot pile up calls.
const maxInFlight = 4

// finalReleaseTimeout bounds the release of this instance's lease when the
// agent stops (at most the declare timeout): long enough for a reachable
// authority, short enough not to hold up the process's exit when it is not.
const finalReleaseTimeout = time.Second

// ErrStopped is returned by Check once Start has returned: the agent
// declares no more and its status stays "unknown" (SHUTTING_DOWN).
var ErrStopped = errors.New("the fence agent has stopped")

// ClusterFence is this cluster's fence agent, one instance of the cluster
// (see Options.Instance). It declares the cluster's epoch to the authority,
// keeps the answer as a fencestate.State, writes every change through the
// Writer and signals every status transition.
type ClusterFence struct {
	opts    Options
	rules   rules
	log     logr.Logger
	metrics *metrics

	changes chan struct{}
	trigger chan struct{}
	started atomic.Bool
	// seq numbers the declarations in the order they are sent.
	seq atomic.Uint64
	// answered is set once a declaration got an answer from the authority.
	answered atomic.Bool
	// leaseTTL is the authority's lease length as last learned, in
	// nanoseconds; 0 until known.
	leaseTTL atomic.Int64
	// shared holds the one declaration that Check callers share before the
	// first answer.
	shared  singleflight.Group
	current atomic.Pointer[fencestate.State]

	// mu serialises applying results: deciding, writing and publishing a
	// state happen as one step, in sequence order.
	mu sync.Mutex
	// applied is the sequence number of the newest applied result.
	applied uint64
	// expires is when the current state stops being trusted; zero: never.
	expires    time.Time
	stopExpiry chan struct{}
	// holder is set while this instance may still hold a lease on the
	// authority: from a grant until its lease is released.
	holder    bool
	releasing bool
	// stopped is set when Start returns: no result is applied after it,
	// so the shutdown status stays written.
	stopped bool
	// checks counts the declarations Check started that may still be in
	// flight; the agent waits for them before it releases its lease.
	checks sync.WaitGroup
	// written is set once data.fence was written; dirty after a failed
	// write, so that the next step writes again even without a change.
	written, dirty bool
	// failingSince is when the current run of failed calls began; zero
	// while the authority answers.
	failingSince time.Time
	// warnedLease is set once the lease was found too short for the
	// declare interval.
	warnedLease bool
}

// New validates opts and returns an agent that has not started yet.
func New(opts Options) (*ClusterFence, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	c := &ClusterFence{
		opts: opts,
		rules: rules{
			domain:   opts.Domain,
			self:     fencestate.Cluster{Name: opts.ClusterName, UID: opts.ClusterUID, Epoch: opts.Epoch},
			instance: opts.Instance,
			margin:   opts.LeaseMargin,
		},
		log:     opts.Logger.WithValues("domain", opts.Domain, "cluster", opts.ClusterName, "epoch", opts.Epoch, "instance", opts.Instance),
		metrics: m,
		changes: make(chan struct{}, 1),
		trigger: make(chan struct{}, 1),
	}
	initial := c.rules.initial()
	c.current.Store(&initial)
	m.setStatus(initial.Status)
	return c, nil
}

// Status returns the current fence state. It never blocks on the network.
func (c *ClusterFence) Status() fencestate.State { return *c.current.Load() }

// Changes signals every status transition, and every change of holder. A signal is never blocked on:
// transitions that happen while one is pending coalesce into it, so readers
// re-read Status (or data.fence) when signalled.
func (c *ClusterFence) Changes() <-chan struct{} { return c.changes }

// Check returns the fence state. Until some declaration has been answered it
// first waits for one: all callers share a single declaration, which runs
// detached from their contexts and is bounded by the declare timeout. A
// caller whose context ends returns at once with the current state while the
// shared declaration goes on. The error says why no answer came; once the
// agent stopped, it is ErrStopped.
func (c *ClusterFence) Check(ctx context.Context) (fencestate.State, error) {
	if c.answered.Load() {
		return c.Status(), nil
	}
	ch := c.shared.DoChan("declare", func() (any, error) {
		c.mu.Lock()
		if c.stopped {
			c.mu.Unlock()
			return nil, ErrStopped
		}
		c.checks.Add(1)
		c.mu.Unlock()
		defer c.checks.Done()
		// Background, not ctx: the call is shared, so no single caller
		// may cancel it; declare bounds it by the declare timeout.
		return nil, c.declare(context.Background()).err
	})
	c.metrics.checkWaiters.Inc()
	defer c.metrics.checkWaiters.Dec()
	select {
	case r := <-ch:
		return c.Status(), r.Err
	case <-ctx.Done():
		return c.Status(), fmt.Errorf("wait for the fence authority's first answer: %w", ctx.Err())
	}
}

// Start declares at once, then every declare interval (jittered) and at once
// on every WatchFence event, until ctx ends. Then it writes "unknown"
// (reason SHUTTING_DOWN) and, once that is in the store, releases this
// instance's lease, so that a takeover waits neither for the lease of a
// stopped process nor for a process that may still answer admission
// requests from its last state. It returns nil when ctx ends.
func (c *ClusterFence) Start(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("fence agent already started: Start may be called once")
	}
	c.mu.Lock()
	if !c.written {
		// data.fence exists from the start, so policies never read a
		// missing fence as anything but "not holding".
		c.commit(c.Status(), c.expires)
	}
	c.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { c.watch(ctx) })
	c.heartbeat(ctx)
	wg.Wait()
	c.shutdown()
	return nil
}

// shutdown ends this instance's part in the fence: first the store says
// "unknown", so that this process admits nothing more whatever its webhook
// still serves, then the authority hears that its lease is given up. A
// declaration Check started may still be in flight; no answer is applied
// after the status is written, and the release waits for it, so that the
// authority does not renew the lease after the release.
func (c *ClusterFence) shutdown() {
	c.mu.Lock()
	c.stopped = true
	c.armExpiry(time.Time{})
	written := c.commit(c.rules.shuttingDown(c.Status()), time.Time{})
	declared := c.seq.Load() > 0
	c.mu.Unlock()
	c.checks.Wait()
	switch {
	case !declared:
		return
	case !written:
		c.log.Error(nil, "the fence agent stops without releasing its lease: the store did not take the shutdown status, so this process may still act as holder until its lease ends")
		return
	}
	timeout := min(finalReleaseTimeout, c.opts.DeclareTimeout)
	// Detached from Start's context, which has ended: the release is
	// what this instance owes the cluster taking over.
	err := c.sendRelease(context.Background(), timeout)
	st, _ := rpctypes.Status(err)
	switch {
	case err == nil:
		c.log.Info("the fence agent stopped and released this instance's lease")
	case st != nil && st.Code() == codes.FailedPrecondition:
		// Another cluster holds the fence: this instance has no lease.
	default:
		c.log.Error(err, "the fence agent stopped but could not release this instance's lease; a cluster taking over waits until it ends")
	}
}

// outcome is what the heartbeat loop learns from one declaration.
type outcome struct {
	// applied is false when the result was dropped (stale, or the agent
	// is stopping).
	applied bool
	// kind is the answer's kind.
	kind answerKind
	// retryAfter asks for the next declaration that soon (FENCE_ACQUIRING).
	retryAfter time.Duration
	// err is set when no answer came from the authority.
	err error
}

// heartbeat runs the declarations: at start, on the (jittered) interval, on
// watch events, sooner with backoff after transient errors, and when a
// pending takeover may be granted.
func (c *ClusterFence) heartbeat(ctx context.Context) {
	retry := newBackoff(100*time.Millisecond, c.opts.DeclareInterval)
	results := make(chan outcome, maxInFlight)
	var (
		inflight int
		pending  bool
		timer    clock.Timer
		due      time.Time
	)
	schedule := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		timer = c.opts.Clock.NewTimer(d)
		due = c.opts.Clock.Now().Add(d)
	}
	sooner := func(d time.Duration) {
		if c.opts.Clock.Now().Add(d).Before(due) {
			schedule(d)
		}
	}
	launch := func() {
		if inflight == maxInFlight {
			pending = true
			return
		}
		inflight++
		schedule(c.jitter())
		go func() { results <- c.declare(ctx) }()
	}
	defer func() {
		timer.Stop()
		for ; inflight > 0; inflight-- {
			<-results
		}
	}()

	launch()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			launch()
		case <-c.trigger:
			launch()
		case o := <-results:
			inflight--
			switch {
			case !o.applied:
			case o.kind == transient:
				sooner(retry.NextBackOff())
			default:
				retry.Reset()
				if o.retryAfter > 0 {
					// The takeover is granted once the holder's
					// lease is over; the lease's end makes no watch
					// event, so ask again just after it.
					sooner(o.retryAfter + o.retryAfter/10 + 10*time.Millisecond)
				}
			}
			if pending {
				pending = false
				launch()
			}
		}
	}
}

// declare sends one declaration and applies its result unless a newer one
// was applied first.
func (c *ClusterFence) declare(ctx context.Context) outcome {
	seq := c.seq.Add(1)
	sent := c.opts.Clock.Now()
	callCtx, cancel := context.WithTimeout(ctx, c.opts.DeclareTimeout)
	resp, err := c.opts.Client.DeclareClusterEpoch(callCtx, &fencev1.DeclareClusterEpochRequest{
		Domain:      c.opts.Domain,
		ClusterName: c.opts.ClusterName,
		ClusterUid:  c.opts.ClusterUID,
		Epoch:       c.opts.Epoch,
		Instance:    c.opts.Instance,
	})
	cancel()
	a := decode(resp, err)
	c.metrics.duration.Observe(c.opts.Clock.Since(sent).Seconds())
	c.metrics.declarations.WithLabelValues(a.kind.result()).Inc()
	if ctx.Err() != nil {
		// The agent is stopping: a cancelled call says nothing about
		// the fence.
		return outcome{kind: a.kind, err: ctx.Err()}
	}
	if a.kind == granted && a.leaseTTL > 0 {
		c.leaseTTL.Store(int64(a.leaseTTL))
	}

	o := outcome{kind: a.kind, retryAfter: a.retryAfter}
	if a.kind == transient || a.kind == unexpected || a.kind == unsupported {
		o.err = fmt.Errorf("declare epoch %d to the fence authority: %w", c.opts.Epoch, a.err)
	}
	release := false
	c.mu.Lock()
	switch {
	case c.stopped:
		// The agent stopped while the call was out: its shutdown
		// status stays.
		o.err = ErrStopped
	case seq > c.applied:
		o.applied = true
		release = c.apply(seq, a, sent)
	default:
		// An older call than one already applied: its answer (or error)
		// is out of date.
		o.err = nil
	}
	c.mu.Unlock()
	if release {
		c.release(ctx)
	}
	return o
}

// apply moves to the state that a leads to. It reports whether this instance
// must now release its lease: it was granted one (or its cluster is still
// named the holder) and is told CLUSTER_FENCED, and "fenced" is safely in
// the store. c.mu is held.
func (c *ClusterFence) apply(seq uint64, a answer, sent time.Time) bool {
	if a.kind != transient {
		// A failed call is no answer: it does not hide the answers of
		// older calls still in flight.
		c.applied = seq
	}
	if a.kind != transient && a.kind != unexpected && a.kind != unsupported {
		c.answered.Store(true)
	}
	c.noteReachability(a)
	if a.kind == granted && a.leaseTTL-c.opts.LeaseMargin <= c.opts.DeclareInterval && !c.warnedLease {
		c.warnedLease = true
		c.log.Error(nil, "the authority's lease less the lease margin is not longer than the declare interval: the fence lapses between heartbeats; lower --declare-interval or --lease-margin, or raise the authority's lease TTL",
			"leaseTTL", a.leaseTTL.String(), "leaseMargin", c.opts.LeaseMargin.String(), "declareInterval", c.opts.DeclareInterval.String())
	}
	next, expires := c.rules.next(c.Status(), c.expires, a, sent, c.opts.Clock.Now(), c.staleAfter())
	written := c.commit(next, expires)
	switch {
	case a.kind == granted && a.holder.UID == c.opts.ClusterUID:
		c.holder = true
	case a.kind == refusedFenced && (c.holder || a.holder.UID == c.opts.ClusterUID) && written && !c.releasing:
		c.releasing = true
		return true
	}
	return false
}

// noteReachability logs once when the authority stops answering and once
// when it answers again: an unreachable authority (down, a wrong address, a
// TLS mistake) is visible in the log without a line per failed call. c.mu is
// held.
func (c *ClusterFence) noteReachability(a answer) {
	now := c.opts.Clock.Now()
	switch {
	case a.kind == transient && c.failingSince.IsZero():
		c.failingSince = now
		c.log.Error(a.err, "the fence authority does not answer; retrying with backoff (not logged again until it answers), the fence status holds until it expires",
			"status", c.Status().Status)
	case a.kind != transient && !c.failingSince.IsZero():
		c.log.Info("the fence authority answers again", "unreachableFor", now.Sub(c.failingSince).String())
		c.failingSince = time.Time{}
	}
}

// release gives this instance's lease up after it was told CLUSTER_FENCED
// as holder, so that the pending takeover is granted as soon as every
// instance of this cluster did the same, instead of after the leases. A
// failed release is retried on the next CLUSTER_FENCED answer.
func (c *ClusterFence) release(ctx context.Context) {
	err := c.sendRelease(ctx, c.opts.DeclareTimeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releasing = false
	st, _ := rpctypes.Status(err)
	switch {
	case err == nil:
		c.holder = false
		c.log.Info("released the fence to the cluster taking it over")
	case st != nil && st.Code() == codes.FailedPrecondition:
		// The authority no longer has this cluster as holder: nothing
		// is left to release.
		c.holder = false
	case ctx.Err() == nil:
		c.log.Error(err, "release the fence; the cluster taking over is granted when this instance's lease ends")
	}
}

// sendRelease asks the authority to release this instance's lease, within
// timeout.
func (c *ClusterFence) sendRelease(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.opts.Client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{
		Domain:     c.opts.Domain,
		ClusterUid: c.opts.ClusterUID,
		Epoch:      c.opts.Epoch,
		Instance:   c.opts.Instance,
	})
	return err
}

// commit makes next the current state: it writes next through the Writer
// (when it differs from what was written), publishes it, and on a status
// change counts, logs and signals the transition. It reports whether next is
// in the store. c.mu is held.
func (c *ClusterFence) commit(next fencestate.State, expires time.Time) bool {
	if !expires.Equal(c.expires) {
		c.armExpiry(expires)
	}
	prev := c.Status()
	if next == prev && c.written && !c.dirty {
		return true
	}
	// The store is in memory; the timeout only guards against a stuck
	// implementation.
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.DeclareTimeout)
	err := c.opts.Writer.WriteFence(ctx, next)
	cancel()
	switch {
	case err != nil:
		c.metrics.writeErrors.Inc()
		if !c.dirty {
			c.log.Error(err, "write data.fence into the policy store; retrying on the next fence update", "status", next.Status)
		}
		c.dirty = true
	case c.dirty:
		c.log.Info("data.fence written again after failed writes", "status", next.Status)
		c.dirty = false
	}
	c.written = c.written || err == nil
	c.current.Store(&next)
	c.metrics.setFence(next)
	switch {
	case prev.Status != next.Status:
		c.transition(prev, next)
	case prev.Holder != next.Holder:
		// The fence changed hands while this cluster's status stayed (it
		// learns the new holder after releasing, or two other clusters
		// took turns): what the Components say about the holder follows.
		c.signal()
	}
	return err == nil
}

// transition counts, logs and signals one status change.
func (c *ClusterFence) transition(prev, next fencestate.State) {
	c.metrics.setStatus(next.Status)
	c.metrics.transitions.WithLabelValues(string(prev.Status), string(next.Status)).Inc()
	kv := []any{"from", prev.Status, "to", next.Status, "reason", next.Reason, "holder", next.Holder.Name, "holderEpoch", next.Holder.Epoch}
	switch {
	case next.Reason == ReasonShuttingDown:
		c.log.Info("fence status changed: the fence agent stops", kv...)
	case next.Status == fencestate.Fenced, next.Status == fencestate.EpochRegressed, next.Status == fencestate.Unsupported, next.Status == fencestate.Unknown:
		c.log.Error(errors.New(next.Message), "fence status changed: this cluster does not hold the fence", kv...)
	case next.Status == fencestate.Active:
		c.log.Info("fence status changed: this cluster holds the fence", append(kv, "token", next.Token)...)
	default:
		c.log.Info("fence status changed: "+next.Message, kv...)
	}
	c.signal()
}

// signal tells the Changes reader to look again, without ever blocking: a
// signal already pending covers this one.
func (c *ClusterFence) signal() {
	select {
	case c.changes <- struct{}{}:
	default:
	}
}

// armExpiry (re)arms the local timer that moves the state to unknown when it
// goes unrenewed past at, whether or not any call returns. c.mu is held.
func (c *ClusterFence) armExpiry(at time.Time) {
	if c.stopExpiry != nil {
		close(c.stopExpiry)
		c.stopExpiry = nil
	}
	c.expires = at
	if at.IsZero() {
		return
	}
	stop := make(chan struct{})
	c.stopExpiry = stop
	timer := c.opts.Clock.NewTimer(at.Sub(c.opts.Clock.Now()))
	go func() {
		select {
		case <-timer.C():
			c.expire(at)
		case <-stop:
			timer.Stop()
		}
	}()
}

// expire moves the state to unknown if it still expires at at.
func (c *ClusterFence) expire(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.expires.Equal(at) {
		return
	}
	c.stopExpiry = nil
	c.commit(c.rules.expired(c.Status()), time.Time{})
}

// staleAfter is how long a refusal is trusted without a newer answer: one
// lease, as for a grant; three heartbeats until the lease length is known.
func (c *ClusterFence) staleAfter() time.Duration {
	if ttl := time.Duration(c.leaseTTL.Load()); ttl > 0 {
		return ttl
	}
	return 3 * c.opts.DeclareInterval
}

// jitter is the wait before the next heartbeat: up to a fifth below the
// interval, so that the interval stays an upper bound.
func (c *ClusterFence) jitter() time.Duration {
	d := c.opts.DeclareInterval
	return d - time.Duration(rand.Float64()*float64(d)/5)
}
