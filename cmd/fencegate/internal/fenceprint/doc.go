// Package fenceprint shows what the fence authority answers the
// `fencegate fence` commands: a fence, a watch event, the history. Like
// kubectl's printers, one Printer per output format (New), each writing
// the same view of the answer: the table for people, JSON for scripts, with
// times relative to now taken from an injected clock.
package fenceprint
