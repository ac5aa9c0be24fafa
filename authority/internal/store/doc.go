// Package store keeps the fence authority's state in etcd. Each domain's
// state is one JSON record; every request reads it, applies the pure rules
// of package statemachine with the authority's clock, and writes the result
// in one etcd transaction that compares the record's revision, retrying on
// conflict. The fencing token of a grant is the etcd revision that committed
// it, so tokens strictly increase across restarts and across authority
// replicas that share one etcd.
package store
