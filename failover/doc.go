// Package failover moves a fence to another cluster through the clusters'
// Fence objects, as `fencegate failover` does: it reads both clusters'
// Fences, raises the target's spec.epoch above the holder's epoch and, if
// asked to, follows both objects until the target holds the fence and
// enforces it and the old holder is fenced and enforces that, printing a
// timeline of what it saw, in the handover's order: the old holder told,
// stopped admitting and holding its actuators, the fence granted, the new
// holder resuming its actuators, both sides re-marked. The decisions do no
// I/O: which epoch to ask for and whether the authority would take so large
// a step are pure functions of the objects (Plan); what an observed status
// means is decided by Progress from the objects and the steps it saw
// before, which it records; Run does the I/O.
package failover
