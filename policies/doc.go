// Package policies embeds the Rego policies that fencegate ships by default.
// They are the policies operators read, edit and unit-test; the Go side only
// evaluates their entry points data.fencegate.admission.decision and
// data.fencegate.reconcile.decision.
package policies
