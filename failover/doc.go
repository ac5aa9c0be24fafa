// Package failover moves a fence to another cluster through the clusters'
// Fence objects, as `fencegate failover` does: it reads both clusters'
// Fences, raises the target's spec.epoch above the holder's epoch and, if
// asked to, follows both objects until the target holds the fence and
// enforces it and the old holder is fenced and enforces that, printing a
// timeline of what it saw. The decisions — which epoch to ask for, whether
// the authority would take so large a step, what an observed status means —
// are pure functions of the objects (Plan, Progress); Run does the I/O.
package failover
