package fenceagent

import (
	"context"
	"time"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/internal/rewatch"
)

// Bounds of the WatchFence reconnection backoff.
const (
	watchRetryInitial = 200 * time.Millisecond
	watchRetryMax     = 10 * time.Second
)

// watch subscribes to the domain's WatchFence stream and asks for a
// declaration on every event, so that a takeover reaches this cluster in one
// round trip instead of at the next heartbeat. It reconnects with backoff
// until ctx ends; a failed reconnection is counted, and only the loss of a
// working stream is logged.
func (c *ClusterFence) watch(ctx context.Context) {
	loop := rewatch.Loop{Backoff: rewatch.Exponential(watchRetryInitial, watchRetryMax), Clock: c.opts.Clock}
	_ = loop.Run(ctx, c.watchOnce, func(err error, worked bool, _ time.Duration) error {
		c.metrics.watchRetries.Inc()
		if worked {
			c.log.Info("fence watch ended; reconnecting", "error", err, "note", "heartbeats go on meanwhile")
		}
		return nil
	})
}

// watchOnce follows one WatchFence stream until it fails. Every event, the
// first snapshot included (it covers what was missed while disconnected),
// triggers a declaration.
func (c *ClusterFence) watchOnce(ctx context.Context, working func()) error {
	open := func(ctx context.Context) (rewatch.Stream[*fencev1.WatchFenceResponse], error) {
		return c.opts.Client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: c.opts.Domain})
	}
	return rewatch.Messages(open, func(ev *fencev1.WatchFenceResponse) error {
		select {
		case c.watched <- ev.GetFence().GetLeaseTtl().AsDuration():
		default:
			// A declaration is already asked for; it will see this
			// change too.
		}
		return nil
	})(ctx, working)
}
