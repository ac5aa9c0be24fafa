// Package rewatch follows a stream that can end (a watch of the fence
// authority or of a Fence): it runs one watch, and when it ends opens it
// again after a backoff, until the context ends. The backoff starts over
// once a watch has worked, and the pause is timed on an injected clock, so
// that tests move it on without sleeping.
package rewatch

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
	"k8s.io/utils/clock"
)

// Loop reopens a watch that ended.
type Loop struct {
	// Backoff spaces the attempts; Working resets it.
	Backoff backoff.BackOff
	// Clock times the pauses; nil means the real clock.
	Clock clock.Clock
}

// Once runs one watch until it ends, and calls working once the watch has
// shown that it works (an event arrived), so that the next pause starts
// from the backoff's first interval.
type Once func(ctx context.Context, working func()) error

// Ended hears that a watch ended with err (nil: it ended cleanly), whether
// it had worked, and how long the loop pauses before the next. An error it
// returns ends the loop with that error.
type Ended func(err error, worked bool, wait time.Duration) error

// Run runs once again and again until ctx ends, and returns nil then, or
// the first error ended returns.
func (l Loop) Run(ctx context.Context, once Once, ended Ended) error {
	clk := l.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	for {
		worked := false
		err := once(ctx, func() {
			if !worked {
				worked = true
				l.Backoff.Reset()
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		wait := l.Backoff.NextBackOff()
		if err := ended(err, worked, wait); err != nil {
			return err
		}
		timer := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		}
	}
}

// Exponential is an exponential backoff from initial up to maxInterval,
// with the usual ±50 % randomisation so that many clients do not retry in
// step.
func Exponential(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     initial,
		RandomizationFactor: backoff.DefaultRandomizationFactor,
		Multiplier:          2,
		MaxInterval:         maxInterval,
	}
	b.Reset()
	return b
}

// Stream is a stream of messages of type T, such as a gRPC server stream.
type Stream[T any] interface {
	Recv() (T, error)
}

// Messages is the Once of a stream that open starts: it hands each message
// to handle, marks the watch working on the first, and ends when the
// stream or handle fails. The stream's context ends with the watch.
func Messages[T any](open func(context.Context) (Stream[T], error), handle func(T) error) Once {
	return func(ctx context.Context, working func()) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := open(ctx)
		if err != nil {
			return err
		}
		for {
			msg, err := stream.Recv()
			if err != nil {
				return err
			}
			working()
			if err := handle(msg); err != nil {
				return err
			}
		}
	}
}
