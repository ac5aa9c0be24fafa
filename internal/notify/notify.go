// Package notify passes "look again" signals between goroutines: a signal
// is a send on a channel of capacity one that never blocks, so signals sent
// while one is pending coalesce into it and the reader re-reads whatever
// state it watches. The fence agent's Changes and the controller's Marks
// signal this way; Fanout repeats one such signal to several readers.
package notify

import "context"

// New returns a signal channel: capacity one, for Signal.
func New() chan struct{} { return make(chan struct{}, 1) }

// Signal tells the reader of ch to look again, without ever blocking: a
// signal already pending covers this one.
func Signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Fanout repeats every signal of one source to each of its subscribers, so
// that several readers can follow a source that has one channel.
type Fanout struct {
	src  <-chan struct{}
	outs []chan struct{}
}

// NewFanout returns a Fanout of src; Subscribe before Start.
func NewFanout(src <-chan struct{}) *Fanout { return &Fanout{src: src} }

// Subscribe returns a signal channel that hears every signal of the source
// from Start on. It must be called before Start.
func (f *Fanout) Subscribe() <-chan struct{} {
	ch := New()
	f.outs = append(f.outs, ch)
	return ch
}

// Start repeats the source's signals until ctx ends, and returns nil then.
func (f *Fanout) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.src:
			for _, out := range f.outs {
				Signal(out)
			}
		}
	}
}
