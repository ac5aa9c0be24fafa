// Package engine embeds OPA: it loads, compiles and hot-reloads the fence
// policies, owns the data store that data.fence lives in, and evaluates the
// admission and reconcile decisions.
package engine
