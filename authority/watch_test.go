package authority_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

// wantEvent is a watch event: its type, the holder and the pending
// cluster ("" for none) it shows.
type wantEvent struct {
	typ     fencev1.FenceEventType
	holder  string
	pending string
}

func (w wantEvent) String() string {
	return fmt.Sprintf("%s holder=%q pending=%q", w.typ, w.holder, w.pending)
}

func eventOf(resp *fencev1.WatchFenceResponse) wantEvent {
	return wantEvent{
		typ:     resp.GetType(),
		holder:  resp.GetFence().GetHolder().GetClusterName(),
		pending: resp.GetFence().GetPending().GetClusterName(),
	}
}

func TestWatchFenceDeliversEachChangeToEveryWatcher(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: time.Minute})
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var watchers []fencev1.FenceService_WatchFenceClient
	for range 2 {
		w, err := client.WatchFence(ctx, &fencev1.WatchFenceRequest{})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		watchers = append(watchers, w)
	}
	other, err := client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: "other"})
	if err != nil {
		t.Fatalf("watch domain other: %v", err)
	}
	// The first message of a watch is the snapshot; once every watcher has
	// it, every later change reaches it.
	for _, w := range append(watchers, other) {
		first, err := w.Recv()
		if err != nil {
			t.Fatalf("receive the snapshot: %v", err)
		}
		if got, want := eventOf(first), (wantEvent{typ: fencev1.FenceEventType_FENCE_EVENT_TYPE_SNAPSHOT}); got != want {
			t.Fatalf("first message %s, want %s", got, want)
		}
	}

	// Renewals, repeated takeover requests and refusals change neither the
	// holder nor the pending takeover: they must not show up between the
	// events.
	calls := []func() error{
		func() error { _, err := client.DeclareClusterEpoch(ctx, declareReq("", "east", 1)); return err },
		func() error { _, err := client.DeclareClusterEpoch(ctx, declareReq("", "east", 1)); return err },
		func() error {
			_, err := client.DeclareClusterEpoch(ctx, declareReq("", "west", 2))
			return wantCode(err, codes.FailedPrecondition)
		},
		func() error {
			_, err := client.DeclareClusterEpoch(ctx, declareReq("", "west", 2))
			return wantCode(err, codes.FailedPrecondition)
		},
		func() error {
			_, err := client.DeclareClusterEpoch(ctx, declareReq("", "east", 1))
			return wantCode(err, codes.FailedPrecondition)
		},
		func() error { _, err := client.ReleaseFence(ctx, releaseReq("", "east", 1)); return err },
		func() error { _, err := client.DeclareClusterEpoch(ctx, declareReq("", "west", 2)); return err },
		func() error { _, err := client.DeclareClusterEpoch(ctx, declareReq("other", "north", 1)); return err },
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	want := []wantEvent{
		{typ: fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED, holder: "east"},
		{typ: fencev1.FenceEventType_FENCE_EVENT_TYPE_PENDING_CHANGED, holder: "east", pending: "west"},
		{typ: fencev1.FenceEventType_FENCE_EVENT_TYPE_RELEASED, holder: "east", pending: "west"},
		{typ: fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED, holder: "west"},
	}
	for i, w := range watchers {
		for j, wantEv := range want {
			resp, err := w.Recv()
			if err != nil {
				t.Fatalf("watcher %d, event %d: %v", i, j, err)
			}
			if got := eventOf(resp); got != wantEv {
				t.Errorf("watcher %d, event %d: %s, want %s", i, j, got, wantEv)
			}
		}
	}
	// The watcher of the other domain heard nothing of the default one:
	// its next event is the grant in its own domain.
	resp, err := other.Recv()
	if err != nil {
		t.Fatalf("watcher of domain other: %v", err)
	}
	if got, want := eventOf(resp), (wantEvent{typ: fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED, holder: "north"}); got != want {
		t.Errorf("watcher of domain other: %s, want %s", got, want)
	}

	// Stopping the authority ends the streams with Unavailable, so
	// clients know to watch again.
	srv.Stop()
	for {
		_, err := watchers[0].Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("watch after stop: %v, want Unavailable", err)
		}
		break
	}
}

func wantCode(err error, code codes.Code) error {
	if status.Code(err) != code {
		return fmt.Errorf("want code %s, got: %w", code, err)
	}
	return nil
}
