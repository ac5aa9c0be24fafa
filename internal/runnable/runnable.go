// Package runnable names the manager runnables fencegate adds that are not
// controllers: EveryReplica runs on each replica, without leadership (the
// fence agent, the webhook, each instance's entry of its Fence), where
// controller-runtime's RunnableFunc would wait to be elected.
package runnable

import "context"

// EveryReplica is a manager runnable that runs on every replica, not only
// on the elected leader.
type EveryReplica func(ctx context.Context) error

// Start runs the function until ctx ends.
func (f EveryReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection tells the manager to run it without leadership.
func (EveryReplica) NeedLeaderElection() bool { return false }
