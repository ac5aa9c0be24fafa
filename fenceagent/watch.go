package fenceagent

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
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
	retry := newBackoff(watchRetryInitial, watchRetryMax)
	working := false
	for {
		err := c.watchOnce(ctx, func() {
			if !working {
				working = true
				retry.Reset()
			}
		})
		if ctx.Err() != nil {
			return
		}
		c.metrics.watchRetries.Inc()
		if working {
			c.log.Info("fence watch ended; reconnecting", "error", err, "note", "heartbeats go on meanwhile")
			working = false
		}
		timer := c.opts.Clock.NewTimer(retry.NextBackOff())
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
	}
}

// watchOnce follows one WatchFence stream until it fails. Every event, the
// first snapshot included (it covers what was missed while disconnected),
// triggers a declaration.
func (c *ClusterFence) watchOnce(ctx context.Context, onEvent func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.opts.Client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: c.opts.Domain})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		onEvent()
		select {
		case c.watched <- ev.GetFence().GetLeaseTtl().AsDuration():
		default:
			// A declaration is already asked for; it will see this
			// change too.
		}
	}
}

// newBackoff is an exponential backoff from initial up to maxInterval, with
// the usual ±50 % randomisation so that agents do not retry in step.
func newBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     initial,
		RandomizationFactor: backoff.DefaultRandomizationFactor,
		Multiplier:          2,
		MaxInterval:         maxInterval,
	}
	b.Reset()
	return b
}
