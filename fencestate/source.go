package fencestate

// Source is one domain's fence state as this process's policies see it, and
// the news of its changes: what every package that follows the fence takes
// (the Component controller, the Fence keeper). It is safe for concurrent
// use.
type Source interface {
	// Fence returns the current state; false before the first one.
	Fence() (State, bool)
	// Subscribe returns a channel that is signalled after every change of
	// the state from now on: the status, the holder, this cluster's
	// identity or epoch, the refusal of an epoch. Signals coalesce while
	// one is pending, so the reader re-reads Fence when signalled.
	Subscribe() <-chan struct{}
}

// Follow is the Source that reads the state through read and hears of its
// changes through subscribe: in fencegate run, the policy engine's
// data.fence and the fence agent's signals, which come after the agent
// wrote the engine.
func Follow(read func() (State, bool), subscribe func() <-chan struct{}) Source {
	return follow{read: read, subscribe: subscribe}
}

type follow struct {
	read      func() (State, bool)
	subscribe func() <-chan struct{}
}

func (f follow) Fence() (State, bool)       { return f.read() }
func (f follow) Subscribe() <-chan struct{} { return f.subscribe() }
