// Package notify passes "look again" signals between goroutines: a signal
// is a send on a channel of capacity one that never blocks, so signals sent
// while one is pending coalesce into it and the reader re-reads whatever
// state it watches. The controller's Marks signal this way; Broadcast sends
// one such signal to every subscriber, as the fence agent does.
package notify

import "sync"

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

// Broadcast signals each of its subscribers at once, so that several
// readers follow one source of changes. Its zero value has no subscribers;
// it is safe for concurrent use.
type Broadcast struct {
	mu   sync.Mutex
	outs []chan struct{}
}

// Subscribe returns a signal channel that hears every Signal from now on.
func (b *Broadcast) Subscribe() <-chan struct{} {
	ch := New()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outs = append(b.outs, ch)
	return ch
}

// Signal tells every subscriber to look again, without ever blocking: a
// subscriber that has not read its last signal yet keeps that one.
func (b *Broadcast) Signal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, out := range b.outs {
		Signal(out)
	}
}
