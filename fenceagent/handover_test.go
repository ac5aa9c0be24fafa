package fenceagent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/fencestate"
)

// handoverProbe is an AwaitHandover that records when it was called and
// returned, with the deadline it was given, and returns once held is
// closed or its context ends.
type handoverProbe struct {
	held chan struct{}

	mu               sync.Mutex
	called, returned time.Time
	deadline         time.Time
	fenced           fencestate.State
	err              error
}

func (p *handoverProbe) await(ctx context.Context, fenced fencestate.State) error {
	p.mu.Lock()
	p.called, p.fenced = time.Now(), fenced
	p.deadline, _ = ctx.Deadline()
	p.mu.Unlock()
	var err error
	select {
	case <-p.held:
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.mu.Lock()
	p.returned, p.err = time.Now(), err
	p.mu.Unlock()
	return err
}

func (p *handoverProbe) seen() (called, returned, deadline time.Time, fenced fencestate.State, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.called, p.returned, p.deadline, p.fenced, p.err
}

// TestHandoverOrder: a holder told CLUSTER_FENCED releases the fence only
// once AwaitHandover says its actuators are held, so the cluster taking
// over becomes active after that; when they are not held within the
// lease's validity, the lease ends by itself and the new holder, granted
// after the expiry, resumes its actuators only after the takeover grace.
func TestHandoverOrder(t *testing.T) {
	const (
		lease = 3 * time.Second
		grace = 4 * time.Second
	)
	tests := map[string]struct {
		// holdAfter is when the holder's actuators are held after it is
		// told; 0: never.
		holdAfter    time.Duration
		wantReleased bool
	}{
		"held within the lease: released after the holds, no grace":        {holdAfter: 300 * time.Millisecond, wantReleased: true},
		"never held: the lease ends by itself, the new holder waits grace": {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: lease, Quiet: true})
			log := &storeLog{}
			violations := log.exclusive()
			probe := &handoverProbe{held: make(chan struct{})}
			fast := func(o *Options) {
				o.DeclareInterval, o.DeclareTimeout, o.LeaseMargin = 400*time.Millisecond, 300*time.Millisecond, 500*time.Millisecond
				o.TakeoverGrace = grace
			}
			eastAgent := runAgent(t, srv.Addr, log, east, func(o *Options) {
				fast(o)
				o.AwaitHandover = probe.await
			})
			waitStatus(t, eastAgent.ClusterFence, fencestate.Active)
			westAgent := runAgent(t, srv.Addr, log, withEpoch(west, 8), fast)
			waitStatus(t, eastAgent.ClusterFence, fencestate.Fenced)
			if tc.holdAfter > 0 {
				time.Sleep(tc.holdAfter)
				close(probe.held)
			}
			active := waitStatus(t, westAgent.ClusterFence, fencestate.Active)
			westActiveAt := time.Now()
			called, returned, deadline, fenced, err := probe.seen()

			if called.IsZero() {
				t.Fatal("AwaitHandover was not called before the release")
			}
			if fenced.Status != fencestate.Fenced || fenced.Holder.Name == "" {
				t.Errorf("AwaitHandover was given %+v, want the fenced state naming a holder", fenced)
			}
			// The deadline is the validity of east's last lease: at most
			// a lease less the margin after a declaration east sent.
			if limit := called.Add(lease - 500*time.Millisecond); deadline.IsZero() || deadline.After(limit) {
				t.Errorf("AwaitHandover's deadline %v, want at most the lease's validity (%v)", deadline, limit)
			}
			if !returned.Before(westActiveAt) {
				t.Errorf("west active (%v) before east's actuators were held (%v)", westActiveAt, returned)
			}
			if v := violations(); len(v) > 0 {
				t.Errorf("two clusters active at once: %v", v)
			}
			if tc.wantReleased {
				if err != nil {
					t.Errorf("AwaitHandover failed: %v", err)
				}
				if active.ResumeAtNS != 0 {
					t.Errorf("west granted after a release has ResumeAtNS %d, want 0", active.ResumeAtNS)
				}
				return
			}
			if err == nil {
				t.Error("AwaitHandover returned nil, want its deadline")
			}
			// Granted after east's lease expired: west's actuators wait
			// the grace from the grant.
			resume := time.Unix(0, active.ResumeAtNS)
			if active.ResumeAtNS == 0 || resume.Before(westActiveAt.Add(grace-time.Second)) || resume.After(westActiveAt.Add(grace+time.Second)) {
				t.Errorf("west granted after an expiry resumes at %v, want about %s after it became active (%v)", resume, grace, westActiveAt)
			}
		})
	}
}
