package fenceagent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc/codes"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/rewatch"
)

// leaseStanding is where this instance stands with its lease on the
// authority, as far as the agent knows.
type leaseStanding int

const (
	// noLease: never granted, or given up.
	noLease leaseStanding = iota
	// holdsLease: granted, or named holder by a refusal, and not released.
	holdsLease
	// releasing: a release is out.
	releasing
)

// storeStanding is where data.fence stands.
type storeStanding int

const (
	// The zero value: nothing written yet.
	_ storeStanding = iota
	// inStore: the current state is in the store.
	inStore
	// writeFailed: the last write failed; the next step writes again even
	// without a change.
	writeFailed
)

// outcome is what one declaration's end tells the loop's scheduling and the
// one who asked for it.
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

// result is a declaration's answer, sent to the loop by the goroutine that
// made the call.
type result struct {
	seq   uint64
	epoch uint64
	// id is the declaration's declaration_id; kept is the lease it asked
	// the authority to keep (id 0: it asked for a renewal).
	id     uint64
	kept   heldLease
	sent   time.Time
	took   time.Duration
	answer answer
	// replies receive the outcome.
	replies []chan outcome
}

// loop owns the agent's state. Its run method is the one goroutine that
// reads or changes these fields; calls to the authority run in goroutines
// of their own and send their results back.
type loop struct {
	c     *ClusterFence
	clock clock.WithTicker
	// rules decide the states; they name this cluster.
	rules rules
	// epochs are the epoch asked for, the one accepted, and which one is
	// declared.
	epochs epochs
	// generation is the newest generation of this cluster the agent
	// knows, which every declaration presents.
	generation uint64

	// state is the current fence state, published as c.current.
	state fencestate.State
	// expires is when state stops being trusted; zero: never. expiry
	// fires then.
	expires time.Time
	expiry  clock.Timer
	store   storeStanding
	lease   leaseStanding
	// releaseBy is when the lease this instance releases stops being
	// valid: the end of its last active state. AwaitHandover may wait
	// until then.
	releaseBy time.Time
	// held is the lease the current state acts on, while it is active.
	held heldLease

	// seq numbers the declarations in the order they are sent; applied is
	// the newest one whose answer was applied.
	seq, applied uint64
	// releasedThrough is the newest declaration sent before this
	// instance's last release ended (see voidedByRelease).
	releasedThrough uint64
	inflight        int
	// queued is set when a declaration was asked for while maxInFlight
	// were out; queuedReplies wait for it.
	queued        bool
	queuedReplies []chan outcome
	results       chan result
	releases      chan error
	// calls is the context of the declarations; shutdown cancels it once
	// the shutdown status is written.
	calls     context.Context
	stopCalls context.CancelFunc

	// heartbeat fires the next declaration, at due.
	heartbeat clock.Timer
	due       time.Time
	retry     *backoff.ExponentialBackOff
	// leaseTTL is the authority's lease length as last learned; 0 until
	// known.
	leaseTTL time.Duration

	// waiters are Check callers waiting for the next declaration to end.
	waiters []chan error
	// releaseReplies wait for the release a declaration's answer started:
	// who asked for that declaration hears of it once the release ended.
	releaseReplies []deferredReply
	// failingSince is when the current run of failed calls began; zero
	// while the authority answers.
	failingSince time.Time
	// warnedLease is set once the lease was found no longer than the
	// lease margin.
	warnedLease bool
	stopping    bool
}

func newLoop(c *ClusterFence) *loop {
	calls, stopCalls := context.WithCancel(context.Background())
	return &loop{
		calls:      calls,
		stopCalls:  stopCalls,
		c:          c,
		clock:      c.opts.Clock,
		rules:      c.rules,
		epochs:     epochs{requested: c.opts.Epoch},
		generation: c.opts.ClusterGeneration,
		state:      c.Status(),
		results:    make(chan result, maxInFlight),
		releases:   make(chan error, 1),
		retry:      rewatch.Exponential(100*time.Millisecond, c.opts.DeclareInterval),
	}
}

// timerC is t's channel; nil (never ready) without a timer.
func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// run handles the agent's events until ctx ends, then shuts down.
func (l *loop) run(ctx context.Context) {
	// data.fence exists from the start, so policies never read a missing
	// fence as anything but "not holding".
	l.commit(l.state, time.Time{})
	if l.c.heartbeats {
		l.launch()
	}
	for {
		select {
		case <-ctx.Done():
			l.shutdown()
			return
		case <-timerC(l.heartbeat):
			l.heartbeat = nil
			l.launch()
		case <-timerC(l.expiry):
			l.expiry = nil
			l.commit(l.rules.expired(l.state), time.Time{})
		case ttl := <-l.c.watched:
			if ttl > 0 {
				l.leaseTTL = ttl
			}
			l.launch()
		case req := <-l.c.requests:
			l.handle(req)
		case r := <-l.results:
			l.inflight--
			l.finish(r)
		case err := <-l.releases:
			l.released(err)
		}
	}
}

// handle answers a request from outside the loop.
func (l *loop) handle(req request) {
	switch {
	case req.epoch != 0:
		req.done <- l.setEpoch(req.epoch)
	case req.check != nil && l.c.answered.Load():
		req.check <- nil
	case req.check != nil:
		l.waiters = append(l.waiters, req.check)
		if l.inflight == 0 {
			l.launch()
		}
	case req.declare != nil:
		l.launch(req.declare)
	}
}

// setEpoch makes the agent declare epoch from now on, and declares it at
// once (see epochs.request).
func (l *loop) setEpoch(epoch uint64) error {
	previous := l.epochs.declared()
	declare, err := l.epochs.request(epoch)
	if !declare {
		return err
	}
	l.c.log.Info("declared epoch set", "previousEpoch", previous, "declaredEpoch", epoch)
	// The state keeps naming the epoch its answer was for: the answer to
	// the declaration below names the new one, so that a reader of the
	// state (the Fence object, a failover waiting for it) never takes the
	// old answer for one to the new epoch.
	l.launch()
	return nil
}

// launch sends one declaration, unless maxInFlight are out already; then
// one is sent as soon as one of them ends.
func (l *loop) launch(replies ...chan outcome) {
	if l.inflight == maxInFlight {
		l.queued = true
		l.queuedReplies = append(l.queuedReplies, replies...)
		return
	}
	l.inflight++
	l.seq++
	if l.c.heartbeats {
		l.schedule(l.jitter())
	}
	// A generation adopted from the Fence since the last declaration is
	// presented from this one on.
	l.generation = max(l.generation, l.c.adopted.Load())
	r := result{seq: l.seq, epoch: l.epochs.declared(), id: newDeclarationID(), replies: replies}
	if h := l.held; h.id != 0 && h.epoch == r.epoch && l.state.Status == fencestate.Active &&
		KeepsLease(l.clock.Since(h.sent), l.renewInterval(), h.ttl, l.c.opts.LeaseMargin) {
		r.kept = h
	}
	req := &fencev1.DeclareClusterEpochRequest{
		Domain:            l.c.opts.Domain,
		ClusterName:       l.c.opts.ClusterName,
		ClusterUid:        l.c.opts.ClusterUID,
		Epoch:             r.epoch,
		Instance:          l.c.opts.Instance,
		ClusterGeneration: l.generation,
		DeclarationId:     r.id,
		KeepLeaseOf:       r.kept.id,
	}
	go func() {
		// Not Start's context: a call that is out when the agent stops
		// ends only after the shutdown status is written, and is waited
		// for, so that the release comes after it.
		r.sent = l.clock.Now()
		ctx, cancel := context.WithTimeout(l.calls, l.c.opts.DeclareTimeout)
		resp, err := l.c.opts.Client.DeclareClusterEpoch(ctx, req)
		cancel()
		r.took = l.clock.Since(r.sent)
		r.answer = r.leaseFrom(decode(resp, err))
		l.results <- r
	}()
}

// finish applies a declaration's result unless a newer one was applied
// first, tells whoever waits for it, and schedules the next declaration.
func (l *loop) finish(r result) {
	a := r.answer
	l.c.metrics.duration.Observe(r.took.Seconds())
	l.c.metrics.declarations.WithLabelValues(a.kind.result()).Inc()
	if a.kind == granted && a.leaseTTL > 0 {
		l.leaseTTL = a.leaseTTL
	}
	o := outcome{kind: a.kind, retryAfter: a.retryAfter}
	if a.kind == transient || a.kind == unexpected || a.kind == unsupported {
		o.err = fmt.Errorf("declare epoch %d to the fence authority: %w", r.epoch, a.err)
	}
	wasReleasing := l.lease == releasing
	reverted := l.learn(r)
	switch {
	case l.stopping:
		// Its answer must not overwrite the shutdown status.
		o.err = ErrStopped
	case reverted:
		// No answer about the fence: the state stays the accepted
		// epoch's, and now says which epoch was refused. It hides no
		// older answer still out, which are for the epoch declared.
		o.applied = true
		l.commit(l.state, l.expires)
	case r.epoch != l.epochs.declared() && a.kind != granted && a.kind != transient:
		// A refusal of an epoch this agent no longer declares answers a
		// question nobody asks any more (the answer to the epoch
		// declared follows); a grant still is a lease.
		o.err = nil
	case a.kind == granted && l.voidedByRelease(r):
		// The lease it grants may be one the release gave up: the
		// fence may already be another cluster's.
		o.err = nil
		l.c.log.Info("fence grant ignored: its declaration was sent before the release ended", "status", l.state.Status)
	case r.seq > l.applied:
		o.applied = true
		l.apply(r)
	default:
		// An older call than one already applied: its answer (or error)
		// is out of date.
		o.err = nil
	}
	for _, w := range l.waiters {
		w <- o.err
	}
	l.waiters = nil
	if l.lease == releasing && !wasReleasing {
		for _, reply := range r.replies {
			l.releaseReplies = append(l.releaseReplies, deferredReply{reply, o})
		}
	} else {
		for _, reply := range r.replies {
			reply <- o
		}
	}
	if l.c.heartbeats && !l.stopping && o.applied {
		switch o.kind {
		case transient:
			l.sooner(l.retry.NextBackOff())
		default:
			l.retry.Reset()
			if l.due.After(l.clock.Now().Add(l.renewInterval())) {
				// The lease learned is shorter than the one the
				// heartbeat was scheduled for.
				l.schedule(l.jitter())
			}
			if o.retryAfter > 0 {
				// The takeover is granted once the holder's lease is
				// over; the lease's end makes no watch event, so ask
				// again just after it.
				l.sooner(o.retryAfter + o.retryAfter/10 + 10*time.Millisecond)
			}
		}
	}
	if l.queued && !l.stopping {
		l.queued = false
		replies := l.queuedReplies
		l.queuedReplies = nil
		l.launch(replies...)
	}
}

// learn takes in what r's answer says besides the fence state: whether the
// authority accepted its epoch or refused it for its step, and the cluster's
// generation. It runs for every answer, even one too old to change the
// state, since the authority recorded it all the same. It reports whether
// the answer refused the epoch asked for and the agent went back to the
// accepted one.
func (l *loop) learn(r result) bool {
	a := r.answer
	if a.kind.accepted() {
		l.epochs.accept(r.epoch)
		// Generations only rise (the authority issues each one above
		// the last), so the largest is the newest whatever order answers
		// arrive in. A CLUSTER_RESTORED refusal's is never taken: a
		// restored copy would then simply be accepted.
		l.generation = max(l.generation, a.generation)
		return false
	}
	if a.kind != refusedStep {
		return false
	}
	// Without an accepted epoch to go back to, the refusal is the state
	// (unknown, EPOCH_STEP_TOO_LARGE), and SetEpoch may lower the epoch.
	if !l.epochs.refuseStep(r.epoch, l.rules.epochRefusal(a, r.epoch, l.epochs.accepted)) {
		return false
	}
	l.c.log.Error(a.err, "fence authority refuses the epoch asked for; declaring the last accepted epoch",
		"refusedEpoch", r.epoch, "declaredEpoch", l.epochs.accepted, "message", l.epochs.refused.Message)
	return true
}

// deferredReply is an outcome its asker hears only once the release the
// answer started ended.
type deferredReply struct {
	to chan outcome
	o  outcome
}

// apply moves to the state that r's answer leads to, and releases this
// instance's lease when it is told CLUSTER_FENCED as holder and "fenced" is
// safely in the store.
func (l *loop) apply(r result) {
	a := r.answer
	if a.kind != transient {
		// A failed call is no answer: it does not hide the answers of
		// older calls still in flight.
		l.applied = r.seq
	}
	if a.kind != transient && a.kind != unexpected && a.kind != unsupported {
		l.c.answered.Store(true)
	}
	l.noteReachability(a)
	if a.kind == granted && a.leaseTTL <= l.c.opts.LeaseMargin && !l.warnedLease {
		l.warnedLease = true
		l.c.log.Error(nil, "fence lease too short to hold", "leaseTTL", a.leaseTTL.String(), "leaseMargin", l.c.opts.LeaseMargin.String(),
			"fix", "lower --lease-margin, or raise the authority's --lease-ttl")
	}
	if a.kind == refusedPermission {
		l.notePermissionDenied(a)
	}
	if l.state.Status == fencestate.Active {
		// Leaving active or renewing, the lease is valid until the
		// active state's end: a release waits for the handover until
		// then at most.
		l.releaseBy = l.expires
	}
	next, expires := l.rules.at(r.epoch).next(l.state, l.expires, a, r.sent, l.clock.Now(), l.staleAfter())
	written := l.commit(next, expires)
	switch {
	case next.Status != fencestate.Active:
		l.held = heldLease{}
	case a.kind == granted:
		l.held = heldLease{id: a.leaseID, sent: a.leaseSent, ttl: a.leaseTTL, epoch: r.epoch}
	}
	switch {
	case a.kind == granted && a.holder.UID == l.c.opts.ClusterUID:
		l.lease = holdsLease
	case a.kind == refusedFenced && (l.lease == holdsLease || a.holder.UID == l.c.opts.ClusterUID) && written:
		l.startRelease()
	}
}

// voidedByRelease reports whether r was sent before this instance's release
// ended, or while one is out. The authority may have answered it before it
// took the release in, on any replica (one whose record a pending takeover
// had not yet reached, or that answered from its cached record): its grant
// then names a lease the release gave up, and the cluster taking over may be
// granted at once. Such a grant is void even when it is the newest answer; a
// declaration sent after the release ended is answered after it, and its
// grant, if any, is a lease the authority holds to.
func (l *loop) voidedByRelease(r result) bool {
	return l.lease == releasing || r.seq <= l.releasedThrough
}

// notePermissionDenied logs once when the authority starts refusing this
// agent's identity; the state says so too, and the agent recovers by itself
// once the authority's authorization allows it again.
func (l *loop) notePermissionDenied(a answer) {
	if l.state.Reason == rpctypes.ReasonPermissionDenied {
		return
	}
	l.c.log.Error(a.err, "fence authority refuses this agent's identity", "identity", a.identity,
		"fix", "bind the identity of the agent's client certificate to this cluster in the authority's authorization file")
}

// noteReachability logs once when the authority stops answering and once
// when it answers again: an unreachable authority (down, a wrong address, a
// TLS mistake) is visible in the log without a line per failed call.
func (l *loop) noteReachability(a answer) {
	now := l.clock.Now()
	switch {
	case a.kind == transient && l.failingSince.IsZero():
		l.failingSince = now
		l.c.log.Error(a.err, "fence authority does not answer; retrying", "status", l.state.Status,
			"note", "logged once until it answers; the fence status holds until it expires")
	case a.kind != transient && !l.failingSince.IsZero():
		l.c.log.Info("fence authority answers again", "unreachableFor", now.Sub(l.failingSince).String())
		l.failingSince = time.Time{}
	}
}

// startRelease gives this instance's lease up after it was told
// CLUSTER_FENCED as holder, so that the pending takeover is granted as soon
// as every instance of this cluster did the same, instead of after the
// leases. A failed release is retried on the next CLUSTER_FENCED answer.
func (l *loop) startRelease() {
	if l.lease == releasing {
		return
	}
	handover := l.handover()
	if handover.await != nil && !handover.until.After(l.clock.Now()) {
		// The lease's validity is over: this instance no longer acts as
		// holder, and the authority grants the takeover when the lease
		// ends. Releasing now could come before this cluster's actuators
		// are held.
		if l.lease == holdsLease {
			l.c.log.Info("fence lease left to end by itself: its validity ended before the actuators were held")
		}
		l.lease = noLease
		return
	}
	l.lease = releasing
	epoch := l.epochs.declared()
	go func() { l.releases <- l.sendRelease(epoch, l.c.opts.DeclareTimeout, handover) }()
}

// handoverWait is what a release waits for before it is sent: the
// cluster's actuators held (await, given the fenced state), until the
// lease's validity ends at the latest.
type handoverWait struct {
	await func(context.Context, fencestate.State) error
	state fencestate.State
	until time.Time
}

// handover is the wait of a release started now. An instance that was
// never active in this process (a restarted container of the holder's pod
// keeps its instance name, and may have a lease from before) may hold a
// lease of a whole usable TTL.
func (l *loop) handover() handoverWait {
	w := handoverWait{await: l.c.opts.AwaitHandover, state: l.state, until: l.releaseBy}
	if w.until.IsZero() {
		w.until = l.clock.Now().Add(max(l.leaseTTL-l.c.opts.LeaseMargin, l.c.opts.DeclareTimeout))
	}
	return w
}

// errHandoverUnfinished is a release's end when the cluster's actuators
// were not held before the lease's validity ended.
var errHandoverUnfinished = errors.New("the actuators were not all held before the lease's validity ended")

// released takes in the end of a release startRelease sent.
func (l *loop) released(err error) {
	l.releasedThrough = l.seq
	defer func() {
		for _, reply := range l.releaseReplies {
			reply.to <- reply.o
		}
		l.releaseReplies = nil
	}()
	st, _ := rpctypes.Status(err)
	switch {
	case err == nil:
		l.lease = noLease
		l.c.log.Info("fence released to the cluster taking it over")
	case st != nil && st.Code() == codes.FailedPrecondition:
		// The authority no longer has this cluster as holder: nothing is
		// left to release.
		l.lease = noLease
	case errors.Is(err, errHandoverUnfinished):
		// Retrying cannot help: the validity is over.
		l.lease = noLease
		l.c.log.Error(err, "fence not released", "note", "the cluster taking over is granted when this instance's lease ends, and keeps its actuators held for its takeover grace")
	default:
		l.lease = holdsLease
		l.c.log.Error(err, "fence release failed", "note", "the cluster taking over is granted when this instance's lease ends")
	}
}

// sendRelease asks the authority to release this instance's lease, declared
// at epoch, within timeout. It may run outside the loop: it reads only what
// never changes.
func (l *loop) sendRelease(epoch uint64, timeout time.Duration, handover handoverWait) error {
	if handover.await != nil {
		ctx, cancel := context.WithTimeout(context.Background(), handover.until.Sub(l.clock.Now()))
		err := handover.await(ctx, handover.state)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %w", errHandoverUnfinished, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if before := l.c.opts.BeforeRelease; before != nil {
		if err := before(ctx); err != nil {
			return fmt.Errorf("before the release: %w", err)
		}
	}
	_, err := l.c.opts.Client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{
		Domain:      l.c.opts.Domain,
		ClusterName: l.c.opts.ClusterName,
		ClusterUid:  l.c.opts.ClusterUID,
		Epoch:       epoch,
		Instance:    l.c.opts.Instance,
	})
	return err
}

// shutdown ends this instance's part in the fence: first the store says
// "unknown", so that this process admits nothing more whatever its webhook
// still serves, then the authority hears that its lease is given up. The
// declarations still out are waited for, and no answer is applied after the
// status is written, so that the authority does not renew the lease after
// the release.
func (l *loop) shutdown() {
	l.stopping = true
	for _, t := range []clock.Timer{l.heartbeat, l.expiry} {
		if t != nil {
			t.Stop()
		}
	}
	l.heartbeat, l.expiry = nil, nil
	written := l.commit(l.rules.shuttingDown(l.state), time.Time{})
	l.stopCalls()
	for ; l.inflight > 0; l.inflight-- {
		l.finish(<-l.results)
	}
	for _, w := range l.waiters {
		w <- ErrStopped
	}
	for _, reply := range l.queuedReplies {
		reply <- outcome{err: ErrStopped}
	}
	l.waiters, l.queuedReplies = nil, nil
	if l.lease == releasing {
		l.released(<-l.releases)
	}
	switch {
	case l.seq == 0:
		return
	case !written:
		l.c.log.Error(nil, "fence agent stops without releasing its lease",
			"note", "the store did not take the shutdown status, so this process may act as holder until its lease ends")
		return
	}
	// A process that stops does not wait for the handover: its pod is
	// going, and the other replicas' leases keep the fence until theirs
	// release it.
	err := l.sendRelease(l.epochs.declared(), min(finalReleaseTimeout, l.c.opts.DeclareTimeout), handoverWait{})
	st, _ := rpctypes.Status(err)
	switch {
	case err == nil:
		l.c.log.Info("fence agent stopped and released this instance's lease")
	case st != nil && st.Code() == codes.FailedPrecondition:
		// Another cluster holds the fence: this instance has no lease.
	default:
		l.c.log.Error(err, "fence agent stopped but could not release this instance's lease",
			"note", "a cluster taking over waits until the lease ends")
	}
}

// commit makes next the current state: it writes next through the Writer
// (when it differs from what was written), publishes it, and on a status
// change counts, logs and signals the transition. It reports whether next
// is in the store.
func (l *loop) commit(next fencestate.State, expires time.Time) bool {
	if !expires.Equal(l.expires) {
		l.armExpiry(expires)
	}
	// The generation presented and the refusal of the epoch asked for are
	// the loop's, not any one answer's: every state says them as they are.
	next.ClusterGeneration, next.EpochRefused = l.generation, l.epochs.refused
	prev := l.state
	if next == prev && l.store == inStore {
		return true
	}
	// The store is in memory; the timeout only guards against a stuck
	// implementation.
	ctx, cancel := context.WithTimeout(context.Background(), l.c.opts.DeclareTimeout)
	err := l.c.opts.Writer.WriteFence(ctx, next)
	cancel()
	switch {
	case err != nil:
		l.c.metrics.writeErrors.Inc()
		if l.store != writeFailed {
			l.c.log.Error(err, "data.fence write failed; retrying on the next fence update", "status", next.Status)
		}
		l.store = writeFailed
	case l.store == writeFailed:
		l.c.log.Info("data.fence written again after failed writes", "status", next.Status)
		l.store = inStore
	default:
		l.store = inStore
	}
	l.state = next
	l.c.current.Store(&next)
	l.c.metrics.setFence(next)
	switch {
	case prev.Status != next.Status:
		l.transition(prev, next)
	case prev.Holder != next.Holder, prev.Cluster != next.Cluster, refusedEpoch(prev) != refusedEpoch(next):
		// The fence changed hands while this cluster's status stayed (it
		// learns the new holder after releasing, or two other clusters
		// took turns), or the first answer to a raised epoch (its grant,
		// or its refusal) left the status as it was: what the Components
		// and the Fence say about the holder and the epoch follows. A new
		// generation alone is no news to them.
		l.c.signal()
	}
	return err == nil
}

// refusedEpoch is the epoch s says the authority refuses; 0 for none.
func refusedEpoch(s fencestate.State) uint64 {
	if s.EpochRefused == nil {
		return 0
	}
	return s.EpochRefused.Epoch
}

// transition counts, logs and signals one status change.
func (l *loop) transition(prev, next fencestate.State) {
	m := l.c.metrics
	m.setStatus(next.Status)
	m.transitions.WithLabelValues(string(prev.Status), string(next.Status)).Inc()
	kv := []any{"from", prev.Status, "to", next.Status, "reason", next.Reason, "epoch", next.Cluster.Epoch, "holder", next.Holder.Name, "holderEpoch", next.Holder.Epoch}
	switch {
	case next.Reason == fencestate.ReasonShuttingDown:
		l.c.log.Info("fence status changed: agent stopping", kv...)
	case next.Status == fencestate.Fenced, next.Status == fencestate.EpochRegressed, next.Status == fencestate.Unsupported, next.Status == fencestate.Unknown:
		l.c.log.Error(errors.New(next.Message), "fence status changed: not holding", kv...)
	case next.Status == fencestate.Active:
		l.c.log.Info("fence status changed: holding", append(kv, "token", next.Token)...)
	default:
		l.c.log.Info("fence status changed", append(kv, "message", next.Message)...)
	}
	l.c.signal()
}

// armExpiry (re)arms the timer that moves the state to unknown when it goes
// unrenewed past at, whether or not any call returns.
func (l *loop) armExpiry(at time.Time) {
	if l.expiry != nil {
		l.expiry.Stop()
		l.expiry = nil
	}
	l.expires = at
	if !at.IsZero() {
		l.expiry = l.clock.NewTimer(at.Sub(l.clock.Now()))
	}
}

// schedule makes the next heartbeat come d from now.
func (l *loop) schedule(d time.Duration) {
	if l.heartbeat != nil {
		l.heartbeat.Stop()
	}
	l.heartbeat = l.clock.NewTimer(d)
	l.due = l.clock.Now().Add(d)
}

// sooner brings the next heartbeat forward to d from now, if that is
// sooner than it is due.
func (l *loop) sooner(d time.Duration) {
	if l.heartbeat == nil || l.clock.Now().Add(d).Before(l.due) {
		l.schedule(d)
	}
}

// staleAfter is how long a refusal is trusted without a newer answer: one
// lease, as for a grant; three heartbeats until the lease length is known.
func (l *loop) staleAfter() time.Duration {
	if l.leaseTTL > 0 {
		return l.leaseTTL
	}
	return 3 * l.c.opts.DeclareInterval
}

// renewInterval is the longest wait between two declarations: the declare
// interval, or a third of the part of the lease this cluster may act on
// (lease TTL − margin) when that is shorter, as etcd's lease keepalive
// renews at a third of the TTL. An authority run with a short lease for a
// fast failover then makes agents renew often enough that a holder's
// status never lapses between two heartbeats, instead of flapping.
func (l *loop) renewInterval() time.Duration {
	d := l.c.opts.DeclareInterval
	if usable := l.leaseTTL - l.c.opts.LeaseMargin; l.leaseTTL > 0 && usable > 0 {
		d = min(d, usable/3)
	}
	return d
}

// jitter is the wait before the next heartbeat: up to a fifth below the
// renewal interval, so that the interval stays an upper bound.
func (l *loop) jitter() time.Duration {
	d := l.renewInterval()
	return d - time.Duration(rand.Float64()*float64(d)/5)
}
