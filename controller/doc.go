// Package controller holds the Component reconciler. For each Component it
// asks the policies (data.fencegate.reconcile.decision) whether this cluster
// must hold off, derives the fence conditions from that answer as a pure
// value (Desired), and writes them to the Component's status only when they
// differ, by server-side apply of the fields it owns under FieldManager, so
// that an actuator's status.access and conditions are never overwritten and
// never conflict with fencegate's. Every fence transition re-enqueues every Component, so the whole
// cluster is re-marked without waiting for a resync.
package controller
