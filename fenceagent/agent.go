package fenceagent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/notify"
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
//
// One goroutine, the loop Start runs, owns all of the agent's state; the
// other goroutines (the declarations and releases in flight, the watch)
// only send it what they learn. What the rest of the process reads (Status,
// Check's fast path) is a copy the loop publishes.
type ClusterFence struct {
	opts Options
	// rules are the ones the agent starts with; the loop owns its own
	// copy.
	rules   rules
	log     logr.Logger
	metrics *metrics

	// changes signals every subscriber of a change.
	changes notify.Broadcast
	// requests carry Check's waits and declarations asked for from outside
	// the loop.
	requests chan request
	// watched carries WatchFence events from the watch to the loop: the
	// lease length the fence names, 0 when it names none.
	watched chan time.Duration
	// heartbeats is false only in tests that send every declaration
	// themselves; then the loop neither declares on its own nor watches.
	heartbeats bool

	started atomic.Bool
	// stopped is closed when the loop has ended.
	stopped chan struct{}
	// current is the state the loop published last.
	current atomic.Pointer[fencestate.State]
	// answered is set by the loop once a declaration got an answer from
	// the authority.
	answered atomic.Bool
	// adopted is the highest generation AdoptClusterGeneration was given;
	// the loop presents it from its next declaration on.
	adopted atomic.Uint64
}

// request is something asked of the loop from another goroutine.
type request struct {
	// epoch, if not 0, is a new epoch to declare from now on; done hears
	// whether the loop took it.
	epoch uint64
	done  chan error
	// check, if set, receives the error of the next declaration that ends
	// (nil once one was answered); the loop starts one if none is out.
	check chan error
	// declare, if set, receives the outcome of a declaration the loop
	// starts for this request.
	declare chan outcome
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
			grace:    opts.TakeoverGrace,
		},
		log:        opts.Logger.WithValues("domain", opts.Domain, "cluster", opts.ClusterName, "instance", opts.Instance),
		metrics:    m,
		requests:   make(chan request),
		watched:    make(chan time.Duration, 1),
		heartbeats: true,
		stopped:    make(chan struct{}),
	}
	initial := c.rules.initial()
	initial.ClusterGeneration = opts.ClusterGeneration
	c.current.Store(&initial)
	m.setStatus(initial.Status)
	return c, nil
}

// Status returns the current fence state. It never blocks on the network.
func (c *ClusterFence) Status() fencestate.State { return *c.current.Load() }

// Subscribe returns a channel that is signalled, from now on, on every
// status transition, every change of holder, the first answer to a raised
// epoch (see SetEpoch), and every change of the epoch the authority refuses
// (State.EpochRefused), each once the state is in the Writer. A new cluster
// generation alone is not signalled: it changes no decision. A signal is
// never blocked on: transitions that happen while one is pending coalesce
// into it, so readers re-read Status (or data.fence) when signalled. Each
// caller gets a channel of its own.
func (c *ClusterFence) Subscribe() <-chan struct{} { return c.changes.Subscribe() }

// Check returns the fence state. Until some declaration has been answered
// it first waits for one: all callers share the declaration in flight (the
// agent starts one if none is), which is bounded by the declare timeout and
// cancelled by no caller. A caller whose context ends returns at once with
// the current state while the declaration goes on. The error says why no
// answer came; once the agent stopped, it is ErrStopped. Check waits for
// Start to begin.
func (c *ClusterFence) Check(ctx context.Context) (fencestate.State, error) {
	if c.answered.Load() {
		return c.Status(), nil
	}
	c.metrics.checkWaiters.Inc()
	defer c.metrics.checkWaiters.Dec()
	reply := make(chan error, 1)
	select {
	case c.requests <- request{check: reply}:
	case <-c.stopped:
		return c.Status(), ErrStopped
	case <-ctx.Done():
		return c.Status(), fmt.Errorf("wait for the fence authority's first answer: %w", ctx.Err())
	}
	select {
	case err := <-reply:
		return c.Status(), err
	case <-ctx.Done():
		return c.Status(), fmt.Errorf("wait for the fence authority's first answer: %w", ctx.Err())
	}
}

// SetEpoch makes the agent declare epoch from now on, at once and without
// a restart: a failover that raises the epoch a running process declares.
// The state names the new epoch once an answer to it arrives.
//
// An epoch only rises: a lower one than the agent declares is refused, since
// the authority would take it for a restored cluster (epoch_regressed).
// When the authority refuses an epoch as too large a step
// (EPOCH_STEP_TOO_LARGE) and it had accepted a lower one, the agent goes on
// declaring that one: State.Cluster.Epoch then is the last accepted epoch
// and State.EpochRefused says which one was refused, until the next
// SetEpoch. That one may be below the refused epoch, down to the accepted
// one, which nothing recorded was above; naming the refused epoch again asks
// for it once more. It waits for Start to begin, and fails once the agent
// stopped.
func (c *ClusterFence) SetEpoch(ctx context.Context, epoch uint64) error {
	done := make(chan error, 1)
	select {
	case c.requests <- request{epoch: epoch, done: done}:
	case <-c.stopped:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("set the declared epoch to %d: %w", epoch, ctx.Err())
	}
	return <-done
}

// AdoptClusterGeneration makes the agent present generation g of its
// cluster from its next declaration on, if g is newer (greater) than the
// one it has: a process cut off for a while, or one that starts, catches up
// through the generation its healthy peers write into the cluster's Fence
// status. It writes no state by itself (the next answer's state names the
// generation), and is safe to call from any goroutine at any time.
func (c *ClusterFence) AdoptClusterGeneration(g uint64) {
	for {
		have := c.adopted.Load()
		if g <= have || c.adopted.CompareAndSwap(have, g) {
			return
		}
	}
}

// Start declares at once, then every renewal interval (jittered) and at
// once on every WatchFence event, until ctx ends. Then it writes "unknown"
// (reason SHUTTING_DOWN) and, once that is in the store, releases this
// instance's lease, so that a takeover waits neither for the lease of a
// stopped process nor for a process that may still answer admission
// requests from its last state. It returns nil when ctx ends.
func (c *ClusterFence) Start(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("fence agent already started: Start may be called once")
	}
	defer close(c.stopped)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watching := make(chan struct{})
	if c.heartbeats {
		go func() {
			defer close(watching)
			c.watch(watchCtx)
		}()
	} else {
		close(watching)
	}
	newLoop(c).run(ctx)
	stopWatch()
	<-watching
	return nil
}

// signal tells the subscribers to look again.
func (c *ClusterFence) signal() { c.changes.Signal() }
