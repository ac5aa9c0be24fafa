package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "/fencegate/"

// recordVersion is the schema version of the stored records.
const recordVersion = 1

// maxConflicts bounds how often one call retries after other writers
// changed the record first; each conflict means another call made progress.
const maxConflicts = 50

// unavailableRetries bounds how often one call retries while etcd cannot
// answer (a member down, a leader election).
const unavailableRetries = 8

// attemptTimeout bounds one read or transaction of a call, so a call can
// try again on another etcd member within the caller's deadline.
const attemptTimeout = time.Second

// ErrContention is returned when a call lost the race for a domain's record
// too many times in a row.
var ErrContention = errors.New("too many concurrent writers of the fence record")

// DefaultHistoryLimit is how many history entries a domain keeps when
// Options set no other limit.
const DefaultHistoryLimit = 1000

// Options configure a Store.
type Options struct {
	// LeaseTTL is the lease length of grants and renewals.
	LeaseTTL time.Duration
	// MaxEpochStep is how far above the highest epoch of a domain a
	// declaration may go; 0 means statemachine.DefaultMaxEpochStep.
	MaxEpochStep uint64
	// HistoryLimit is how many history entries each domain keeps: the
	// oldest is dropped in the transaction that adds one past it. 0 means
	// DefaultHistoryLimit; it must be at least
	// statemachine.MaxHistoryPerChange, so that no transaction drops
	// entries it adds.
	HistoryLimit int
	// Prefix starts every key; DefaultPrefix if empty. Authorities that
	// share a prefix share their fences.
	Prefix string
	// Clock is the authority's wall clock: the times it records (grants,
	// lease ends as people read them, history). Nil means the real clock.
	Clock clock.PassiveClock
	// Monotonic reads this replica's monotonic clock: the time since any
	// fixed point. Lease ends are judged by it, from when this replica
	// first saw each lease, so that no replica's wall clock, stepped or
	// set apart from the others', can end a lease early. Nil means the
	// time since New by Clock (the real monotonic clock for the real
	// Clock).
	Monotonic func() time.Duration
	// GenerationPeriod is how often a declaring cluster's generation moves
	// on; 0 means statemachine.DefaultGenerationPeriod.
	GenerationPeriod time.Duration
	// Registerer receives the store's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// Store keeps fences in etcd.
type Store struct {
	client       *clientv3.Client
	machine      statemachine.Machine
	clock        clock.PassiveClock
	monotonic    func() time.Duration
	prefix       string
	historyLimit uint64
	metrics      *metrics

	mu      sync.Mutex
	domains map[string]*domainEntry
	// watches are the etcd watches of the domains watched, each shared
	// by every watcher of its domain.
	watches map[string]*domainWatch
}

// domainEntry serializes this process's writes to one domain (so replicas
// of the authority conflict only with each other, not with themselves) and
// caches the record last read or written, so a call usually costs one
// transaction.
type domainEntry struct {
	lock   *semaphore.Weighted
	cached *Snapshot
	// confirmed is when etcd last confirmed that cached was the current
	// record, on the monotonic clock: no later than the read or
	// transaction that did so began.
	confirmed time.Duration
	// watched is the newest revision of the record that a watch of this
	// process saw.
	watched atomic.Int64
	// leases is when this replica first saw each lease of the domain.
	leases leaseClock
}

// cachedAnswerFor is how long after etcd confirmed a cached record a
// declaration that changes nothing may be answered from it without asking
// etcd again, while this process watches the domain (for its WatchFence
// streams, which agents open), so that another replica's change ends the
// cached record within the watch's delay. Such an answer (a standby's
// CLUSTER_FENCED, a holder's kept lease, a pending takeover's
// FENCE_ACQUIRING) extends no lease: a kept lease still counts from the
// declaration that got it, and every write is still checked against the
// current record. It may be older than an answer another replica gave the
// same agent (a kept lease, to a holder fenced and released there), which
// is why the agent voids every grant to a declaration sent before its
// release ended. The bound covers a watch that fell silent.
const cachedAnswerFor = time.Second

// fresh reports whether an answer that changes nothing may come from cur,
// the cached record, at mono: etcd confirmed it less than cachedAnswerFor
// ago, and no watch of this process saw the record change since.
func (e *domainEntry) fresh(cur Snapshot, mono time.Duration) bool {
	return e.cached != nil && mono-e.confirmed < cachedAnswerFor && e.watched.Load() <= cur.Revision
}

// watching reports whether this process follows the domain with an etcd
// watch.
func (s *Store) watching(domain string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.watches[domain]
	return ok
}

// saw records a revision of the record that a watch saw.
func (e *domainEntry) saw(revision int64) {
	for {
		seen := e.watched.Load()
		if revision <= seen || e.watched.CompareAndSwap(seen, revision) {
			return
		}
	}
}

// Snapshot is one domain's fence as stored at one revision.
type Snapshot struct {
	// Domain is the fence's domain.
	Domain string
	// State is the fence state; the holder's token is filled in.
	State statemachine.State
	// Revision is the etcd revision of the record's last change; 0 while
	// the domain was never declared in.
	Revision int64
	// Actor made the record's last change; nil before the first one.
	Actor *Actor
	// history locates the domain's history entries.
	history historyCursor
}

// Actor is who made a change: the caller as the authority saw it.
type Actor struct {
	// Identity is the caller's identity from its client certificate;
	// empty without one.
	Identity string `json:"identity,omitempty"`
	// Method is the full gRPC method of the call.
	Method string `json:"method,omitempty"`
	// Peer is the caller's network address.
	Peer string `json:"peer,omitempty"`
}

// New returns a store over client.
func New(client *clientv3.Client, opts Options) (*Store, error) {
	if opts.LeaseTTL <= 0 {
		return nil, fmt.Errorf("lease TTL %s: must be positive", opts.LeaseTTL)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.Monotonic == nil {
		clk, start := opts.Clock, opts.Clock.Now()
		opts.Monotonic = func() time.Duration { return clk.Since(start) }
	}
	switch {
	case opts.HistoryLimit == 0:
		opts.HistoryLimit = DefaultHistoryLimit
	case opts.HistoryLimit < statemachine.MaxHistoryPerChange:
		return nil, fmt.Errorf("history limit %d: must be at least %d, the most entries one change of a fence writes (a takeover after every one of %d instances' leases ended)",
			opts.HistoryLimit, statemachine.MaxHistoryPerChange, statemachine.MaxInstances)
	}
	if opts.GenerationPeriod < 0 {
		return nil, fmt.Errorf("cluster generation period %s: must not be negative", opts.GenerationPeriod)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Store{
		client:       client,
		machine:      statemachine.Machine{LeaseTTL: opts.LeaseTTL, MaxEpochStep: opts.MaxEpochStep, GenerationPeriod: opts.GenerationPeriod},
		clock:        opts.Clock,
		monotonic:    opts.Monotonic,
		prefix:       opts.Prefix,
		historyLimit: uint64(opts.HistoryLimit),
		metrics:      m,
		domains:      map[string]*domainEntry{},
	}, nil
}

// LeaseTTL returns the lease length the store grants.
func (s *Store) LeaseTTL() time.Duration { return s.machine.LeaseTTL }

// Declare applies a declaration in a (normalized) domain and stores its
// result, if it changes anything. The result's state is the committed one,
// with the holder's token filled in. A bad request returns a
// *rpctypes.FieldError.
//
// A declaration that adds its cluster's UID to the domain's record (its
// first there) is checked against the UID's binding in every domain, and
// writes it (see binding.go): a UID another domain records under another
// name is refused with a *statemachine.BindingError, and nothing of it is
// recorded.
func (s *Store) Declare(ctx context.Context, domain string, d statemachine.Declaration, by Actor) (statemachine.Result, error) {
	var result statemachine.Result
	var bind *binding
	prep := func(ctx context.Context, cur statemachine.State) error {
		bind = nil
		if _, known := cur.Clusters[d.Cluster.UID]; known || d.Validate() != nil {
			return nil
		}
		b, err := s.readBinding(ctx, d.Cluster)
		bind = &b
		return err
	}
	committed, err := s.update(ctx, domain, by, prep, func(cur statemachine.State, now time.Time) (change, error) {
		var err error
		result, err = s.machine.Declare(cur, d, now)
		if err != nil {
			return change{}, err
		}
		ch := change{state: result.State, write: result.Changed, history: result.History, cached: true}
		if _, joins := result.State.Clusters[d.Cluster.UID]; joins && bind != nil {
			if bind.refusal != nil {
				return change{}, bind.refusal
			}
			ch.binding = bind
		}
		return ch, nil
	})
	if err != nil {
		return statemachine.Result{}, err
	}
	result.State = committed.State
	if result.Answer.Outcome == statemachine.Granted {
		s.metrics.grants.WithLabelValues(domain, string(result.Answer.Grant)).Inc()
	}
	return result, nil
}

// Release applies a release in a (normalized) domain and stores its result,
// if it changes anything. It returns the fence after the release.
func (s *Store) Release(ctx context.Context, domain string, r statemachine.Release, by Actor) (statemachine.ReleaseResult, Snapshot, error) {
	var result statemachine.ReleaseResult
	committed, err := s.update(ctx, domain, by, nil, func(cur statemachine.State, now time.Time) (change, error) {
		var err error
		result, err = s.machine.Release(cur, r, now)
		return change{state: result.State, write: result.Outcome == statemachine.Released, history: result.History}, err
	})
	if err != nil {
		return statemachine.ReleaseResult{}, Snapshot{}, err
	}
	result.State = committed.State
	return result, committed, nil
}

// Revoke applies a revocation in a (normalized) domain and stores its
// result, if it changes anything. It returns the fence after it.
func (s *Store) Revoke(ctx context.Context, domain string, r statemachine.Revocation, by Actor) (statemachine.RevokeResult, Snapshot, error) {
	r.By = by.Identity
	var result statemachine.RevokeResult
	committed, err := s.update(ctx, domain, by, nil, func(cur statemachine.State, now time.Time) (change, error) {
		var err error
		result, err = s.machine.Revoke(cur, r, now)
		return change{state: result.State, write: len(result.History) > 0, history: result.History}, err
	})
	if err != nil {
		return statemachine.RevokeResult{}, Snapshot{}, err
	}
	result.State = committed.State
	return result, committed, nil
}

// Forget removes a cluster's record from a (normalized) domain, if the
// state machine allows it. It returns the fence after it.
func (s *Store) Forget(ctx context.Context, domain string, f statemachine.Forgetting, by Actor) (statemachine.ForgetResult, Snapshot, error) {
	var result statemachine.ForgetResult
	committed, err := s.update(ctx, domain, by, nil, func(cur statemachine.State, now time.Time) (change, error) {
		var err error
		result, err = s.machine.Forget(cur, f, now)
		return change{state: result.State, write: result.Outcome == statemachine.Forgotten, history: result.History}, err
	})
	if err != nil {
		return statemachine.ForgetResult{}, Snapshot{}, err
	}
	result.State = committed.State
	return result, committed, nil
}

// Get reads a (normalized) domain's fence with a linearizable read.
func (s *Store) Get(ctx context.Context, domain string) (Snapshot, error) {
	snap, _, err := s.read(ctx, domain)
	return snap, err
}

// read reads a domain's keys and returns the snapshot and the etcd response,
// whose header revision is where a watch of later changes starts.
func (s *Store) read(ctx context.Context, domain string) (Snapshot, *clientv3.GetResponse, error) {
	resp, err := s.client.Get(ctx, s.domainPrefix(domain), clientv3.WithPrefix())
	if err != nil {
		return Snapshot{}, nil, fmt.Errorf("read fence of domain %q: %w", domain, err)
	}
	snap, err := s.decode(domain, resp.Kvs)
	return snap, resp, err
}

// Check reports whether etcd answers a linearizable read, which needs a
// quorum: the store can serve only then.
func (s *Store) Check(ctx context.Context) error {
	if _, err := s.client.Get(ctx, s.prefix+"health", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd does not answer: %w", err)
	}
	return nil
}

// step computes the next state from the current one at the authority's
// time.
type step func(cur statemachine.State, now time.Time) (change, error)

// prepare reads what a step needs besides the domain's record, given the
// record the step will be applied to; it runs before the authority's
// clocks are read for the step, so that its reads do not age the time
// the step records.
type prepare func(ctx context.Context, cur statemachine.State) error

// change is what one step asks the store to write.
type change struct {
	// state is the next state.
	state statemachine.State
	// write=false means nothing needs storing, though the answer is still
	// checked against the current record, unless it may come from the
	// cached one (cached).
	write bool
	// cached marks an answer that, when it changes nothing, may come from
	// the record this process cached while that is fresh (see
	// domainEntry.fresh): a declaration's. Such an answer extends no lease.
	cached bool
	// history is appended to the domain's history in the same
	// transaction; it needs write.
	history []statemachine.HistoryEntry
	// binding, if set, is written in the same transaction, on the
	// condition that it did not change since it was read; it needs write.
	binding *binding
}

// update runs one read-apply-write cycle on a domain's record: it applies
// next to the record it believes current, and writes the result in one
// transaction that succeeds only if the record did not change meanwhile.
// On a conflict the transaction's else branch returns the current record and
// the cycle runs again, with a fresh clock reading. Retrying after an
// unavailable etcd is safe for the same reason: if the lost transaction did
// commit, the record changed and the retry re-applies the request to the
// state that includes its own effect.
func (s *Store) update(ctx context.Context, domain string, by Actor, prep prepare, next step) (Snapshot, error) {
	entry := s.entry(domain)
	if err := entry.lock.Acquire(ctx, 1); err != nil {
		return Snapshot{}, fmt.Errorf("wait for fence record of domain %q: %w", domain, err)
	}
	defer entry.lock.Release(1)

	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval = 25*time.Millisecond, 500*time.Millisecond
	conflicts, unavailable := 0, 0
	for {
		committed, ok, err := s.attempt(ctx, entry, domain, by, prep, next)
		switch {
		case err == nil && ok:
			return committed, nil
		case err == nil:
			s.metrics.retries.WithLabelValues("conflict").Inc()
			if conflicts++; conflicts >= maxConflicts {
				return Snapshot{}, fmt.Errorf("update fence of domain %q: %w", domain, ErrContention)
			}
			continue
		}
		// An attempt that ran out of its own time (not the caller's) is
		// retried too: a proposal lost with a crashed etcd leader is not
		// answered before etcd's request timeout, many seconds later.
		timedOut := ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded)
		var stepErr *stepError
		retriable := !errors.As(err, &stepErr) && (IsUnavailable(err) || timedOut)
		if !retriable || unavailable >= unavailableRetries {
			return Snapshot{}, err
		}
		unavailable++
		s.metrics.retries.WithLabelValues("unavailable").Inc()
		if err := s.wait(ctx, retry.NextBackOff()); err != nil {
			return Snapshot{}, err
		}
	}
}

// stepError carries an error of the state machine (a bad request) through
// attempt, so it is never retried.
type stepError struct{ err error }

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// attempt runs one read-apply-write cycle within attemptTimeout. It returns
// the committed snapshot and true, or false after a conflict (the entry then
// caches the record that won). After an error the outcome is unknown, so
// the cache is dropped and the next attempt reads the record again.
func (s *Store) attempt(ctx context.Context, entry *domainEntry, domain string, by Actor, prep prepare, next step) (Snapshot, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	cur, err := s.current(ctx, entry, domain)
	if err != nil {
		entry.cached = nil
		return Snapshot{}, false, err
	}
	if prep != nil {
		if err := prep(ctx, cur.State); err != nil {
			return Snapshot{}, false, err
		}
	}
	now, mono := s.clock.Now(), s.monotonic()
	ch, err := next(entry.leases.judge(cur.State, now, mono, s.machine.LeaseTTL), now)
	if err != nil {
		return Snapshot{}, false, &stepError{err}
	}
	entry.leases.remember(ch.state, mono)
	if !ch.write && ch.cached && entry.fresh(cur, mono) && s.watching(domain) {
		s.metrics.cachedAnswers.Inc()
		return cur, true, nil
	}
	committed, ok, err := s.commit(ctx, cur, ch, by)
	if err != nil {
		entry.cached = nil
		return Snapshot{}, false, err
	}
	entry.cached, entry.confirmed = &committed, mono
	if h := committed.State.Holder; ok && h != nil {
		s.metrics.observeHolder(domain, h)
	}
	return committed, ok, nil
}

// current returns the domain's record as this process last saw it, reading
// it from etcd if that is unknown.
func (s *Store) current(ctx context.Context, entry *domainEntry, domain string) (Snapshot, error) {
	if entry.cached != nil {
		return *entry.cached, nil
	}
	began := s.monotonic()
	snap, _, err := s.read(ctx, domain)
	if err != nil {
		return Snapshot{}, err
	}
	entry.cached, entry.confirmed = &snap, began
	return snap, nil
}

// commit writes the change if the record is still at cur's revision,
// together with its history entries and the trimming of the oldest ones.
// It returns the committed snapshot and true, or the record that is current
// instead and false. Without a write it writes nothing but still checks the
// revision in a transaction: an answer that changes nothing (a refused
// release) must not come from a record another replica has changed since
// this one cached it.
func (s *Store) commit(ctx context.Context, cur Snapshot, ch change, by Actor) (Snapshot, bool, error) {
	domain, state := cur.Domain, ch.state
	var ops []clientv3.Op
	conditions := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.stateKey(domain)), "=", cur.Revision)}
	granting := ch.write && state.Holder != nil && state.Holder.Token == 0
	cursor := cur.history
	if ch.write {
		var err error
		var historyOps []clientv3.Op
		if historyOps, cursor, err = s.appendHistory(domain, cursor, ch.history, by); err != nil {
			return Snapshot{}, false, err
		}
		value, err := json.Marshal(record{Version: recordVersion, State: state, Actor: &by, History: cursor})
		if err != nil {
			return Snapshot{}, false, fmt.Errorf("encode fence of domain %q: %w", domain, err)
		}
		ops = append(ops, clientv3.OpPut(s.stateKey(domain), string(value)))
		ops = append(ops, historyOps...)
		if b := ch.binding; b != nil {
			conditions = append(conditions, b.cmp)
			ops = append(ops, b.put)
		}
	}
	if granting {
		g, err := json.Marshal(grantRecord{
			Version: recordVersion, Name: state.Holder.Name, UID: state.Holder.UID,
			Epoch: state.Holder.Epoch, GrantedAt: state.Holder.AcquiredAt,
		})
		if err != nil {
			return Snapshot{}, false, fmt.Errorf("encode grant of domain %q: %w", domain, err)
		}
		ops = append(ops, clientv3.OpPut(s.grantKey(domain), string(g)))
	}
	start := time.Now()
	resp, err := s.client.Txn(ctx).
		If(conditions...).
		Then(ops...).
		Else(clientv3.OpGet(s.domainPrefix(domain), clientv3.WithPrefix())).
		Commit()
	elapsed := time.Since(start).Seconds()
	if err != nil {
		s.metrics.txnDuration.WithLabelValues("error").Observe(elapsed)
		return Snapshot{}, false, fmt.Errorf("store fence of domain %q: %w", domain, err)
	}
	if !resp.Succeeded {
		s.metrics.txnDuration.WithLabelValues("conflict").Observe(elapsed)
		current, err := s.decode(domain, resp.Responses[0].GetResponseRange().Kvs)
		return current, false, err
	}
	if !ch.write {
		s.metrics.txnDuration.WithLabelValues("checked").Observe(elapsed)
		return cur, true, nil
	}
	s.metrics.txnDuration.WithLabelValues("committed").Observe(elapsed)
	rev := resp.Header.Revision
	if granting {
		state.Holder.Token = uint64(rev)
	}
	return Snapshot{Domain: domain, State: state, Revision: rev, Actor: &by, history: cursor}, true, nil
}

func (s *Store) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("wait for etcd: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

func (s *Store) entry(domain string) *domainEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.domains[domain]
	if !ok {
		e = &domainEntry{lock: semaphore.NewWeighted(1)}
		s.domains[domain] = e
	}
	return e
}

// IsUnavailable reports whether etcd could not answer for now: no leader,
// a leader change, a member down. Such calls may be retried.
func IsUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable
}
