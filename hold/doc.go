// Package hold holds the actuators of a cluster that does not hold the
// fence of their domain: a Flux Kustomization, an Argo CD Application, a
// CronJob, … For each object of a configured kind the policies decide
// (data.fencegate.hold.decision, engine.HoldDecision) whether it is held
// here now, the fields that hold it and whether it has gone quiet; Plan
// turns that decision and the object into the one JSON patch that holds or
// releases it, and the controller sends it under its own field manager.
//
// Holding records each field's prior value (or its absence) in the
// object's fencegate.dev/held annotation before it sets the held value;
// releasing sets back exactly that value, and only where fencegate's field
// manager is still the field's sole owner and the field still has the held
// value: a field that a person or another tool set (or took over) while it
// was held is theirs, and a field that was already at the held value when
// the hold began was never fencegate's to release. A record fencegate did
// not write never unholds: it is set aside (UnreadableAnnotation), the
// object is held as one without a record, and no release sets back what
// that record may claim until a person removed it.
//
// Besides the policies' decision, the controller holds a domain's objects
// through the takeover grace of its fence state (fencestate.State's
// ResumeAtNS, after a grant that followed the previous holder's lease
// expiry) and decides each again when the grace ends. A namespace whose
// domain label changes has its objects decided again at once.
//
// The controller counts, per domain and kind, the objects held and the ones
// quiet (the policies say nothing still runs, and have said so for
// Options.QuietFor), as marks for the latest fence state (package
// internal/marks): the Fence's Quiesced condition and status.held are
// derived from them.
package hold
