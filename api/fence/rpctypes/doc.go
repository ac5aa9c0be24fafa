// Package rpctypes is the fence protocol's contract beyond its messages: the
// google.rpc.ErrorInfo domain, reasons and metadata keys of refusals, the
// rules every request field must meet, and the mapping between refusals and
// gRPC errors in both directions. The authority builds its refusals and
// checks its requests here; the agent and the fence commands read refusals
// and check their settings here, so the two sides cannot drift apart.
package rpctypes
