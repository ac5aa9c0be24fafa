// Package ssa writes the status fields that one fencegate field manager
// owns, the two ways the API server lets several writers share a status:
// ApplyStatus applies them by server-side apply, taking ownership of exactly
// what it sends, and RemoveListItems removes list items that another field
// manager also owns (which an apply that leaves them out would only strip of
// its own fields) in one JSON patch that first tests each item, so that a
// list that changed since it was read fails the patch instead of losing
// another item.
package ssa
