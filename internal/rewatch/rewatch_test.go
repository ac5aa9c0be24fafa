package rewatch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/internal/rewatch"
)

// doubling is a backoff without randomisation: 1s, 2s, 4s, … from each
// Reset.
type doubling struct{ next time.Duration }

func (d *doubling) NextBackOff() time.Duration {
	if d.next == 0 {
		d.next = time.Second
	}
	w := d.next
	d.next *= 2
	return w
}

func (d *doubling) Reset() { d.next = 0 }

// TestLoop: each watch that ends is opened again after the backoff's next
// pause, timed on the injected clock; a watch that worked starts the
// backoff over; the loop ends with ctx (nil) or with the error Ended
// returns.
func TestLoop(t *testing.T) {
	errDown := errors.New("down")
	type end struct {
		err    error
		worked bool
		wait   time.Duration
	}
	tests := map[string]struct {
		// works says, for each run of the watch, whether it works before
		// it ends.
		works []bool
		// stopAt makes Ended return an error at that run (1-based); 0:
		// never, the context ends during the last run, which is then not
		// reported.
		stopAt int
		want   []end
	}{
		"failures back off": {
			works: []bool{false, false, false, false},
			want:  []end{{errDown, false, time.Second}, {errDown, false, 2 * time.Second}, {errDown, false, 4 * time.Second}},
		},
		"a watch that worked starts the backoff over": {
			works: []bool{false, false, true, false, false},
			want:  []end{{errDown, false, time.Second}, {errDown, false, 2 * time.Second}, {errDown, true, time.Second}, {errDown, false, 2 * time.Second}},
		},
		"Ended's error ends the loop": {
			works:  []bool{false, false, false},
			stopAt: 2,
			want:   []end{{errDown, false, time.Second}, {errDown, false, 2 * time.Second}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var got []end
			runs := 0
			errStop := errors.New("stop")
			done := make(chan error, 1)
			go func() {
				done <- rewatch.Loop{Backoff: &doubling{}, Clock: clk}.Run(ctx, func(_ context.Context, working func()) error {
					if tc.works[runs] {
						working()
						working() // a second event changes nothing
					}
					runs++
					if runs == len(tc.works) && tc.stopAt == 0 {
						cancel()
					}
					return errDown
				}, func(err error, worked bool, wait time.Duration) error {
					got = append(got, end{err, worked, wait})
					if len(got) == tc.stopAt {
						return errStop
					}
					return nil
				})
			}()
			var err error
		wait:
			for {
				select {
				case err = <-done:
					break wait
				case <-time.After(time.Millisecond):
					if clk.HasWaiters() {
						// The loop pauses on the clock: nothing but the
						// clock ends the pause.
						clk.Step(time.Hour)
					}
				}
			}
			wantErr := error(nil)
			if tc.stopAt > 0 {
				wantErr = errStop
			}
			if !errors.Is(err, wantErr) {
				t.Errorf("Run: %v, want %v", err, wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ends %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("end %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestLoopEndsDuringAPause: a context that ends while the loop waits on the
// clock ends it at once, with nil.
func TestLoopEndsDuringAPause(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- rewatch.Loop{Backoff: &doubling{}, Clock: clk}.Run(ctx,
			func(context.Context, func()) error { return errors.New("down") },
			func(error, bool, time.Duration) error { return nil })
	}()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}

func TestExponential(t *testing.T) {
	b := rewatch.Exponential(100*time.Millisecond, time.Second)
	var last time.Duration
	for range 20 {
		last = b.NextBackOff()
		if last <= 0 || last > 1500*time.Millisecond {
			t.Fatalf("pause %s: want within (0, 1.5s], the maximum with its ±50%%", last)
		}
	}
	if last < 500*time.Millisecond {
		t.Errorf("pause %s after 20 attempts, want near the 1s maximum", last)
	}
	b.Reset()
	if first := b.NextBackOff(); first > 150*time.Millisecond {
		t.Errorf("first pause after Reset %s, want about 100ms", first)
	}
}

// scripted is a stream of the messages it holds, then its end.
type scripted struct {
	msgs []string
	end  error
}

func (s *scripted) Recv() (string, error) {
	if len(s.msgs) == 0 {
		return "", s.end
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

// TestMessages: each message of the stream reaches the handler, the first
// marks the watch working, and the watch ends with the stream's error, the
// handler's or the opening's.
func TestMessages(t *testing.T) {
	errEnd, errHandle, errOpen := errors.New("stream ended"), errors.New("handler failed"), errors.New("cannot open")
	tests := map[string]struct {
		stream  *scripted
		openErr error
		// failOn makes the handler fail on that message.
		failOn  string
		want    []string
		working bool
		err     error
	}{
		"every message, then the stream's end":    {stream: &scripted{msgs: []string{"a", "b"}, end: errEnd}, want: []string{"a", "b"}, working: true, err: errEnd},
		"a stream that ends at once never worked": {stream: &scripted{end: errEnd}, err: errEnd},
		"the handler's error ends the watch":      {stream: &scripted{msgs: []string{"a", "b", "c"}, end: errEnd}, failOn: "b", want: []string{"a", "b"}, working: true, err: errHandle},
		"a stream that cannot open":               {openErr: errOpen, err: errOpen},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var streamCtx context.Context
			open := func(ctx context.Context) (rewatch.Stream[string], error) {
				streamCtx = ctx
				if tc.openErr != nil {
					return nil, tc.openErr
				}
				return tc.stream, nil
			}
			var got []string
			handle := func(m string) error {
				got = append(got, m)
				if m == tc.failOn {
					return errHandle
				}
				return nil
			}
			working := false
			err := rewatch.Messages(open, handle)(context.Background(), func() { working = true })
			if !errors.Is(err, tc.err) || working != tc.working || strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("err %v, working %t, messages %v; want %v, %t, %v", err, working, got, tc.err, tc.working, tc.want)
			}
			if streamCtx.Err() == nil {
				t.Error("the stream's context must end with the watch")
			}
		})
	}
}
