// Package safety checks fencegate's central promise on recorded histories:
// two clusters never both admit Component writes for one fence domain, and
// fencing tokens only grow along time.
//
// Its tests run randomized failover histories: three clusters, each one or
// two pods of a policy engine and a fence agent per domain (one to three
// domains, sharing one connection), in one process against a real authority
// (embedded etcd), with epoch raises of one domain rolled out the way a
// Deployment rolls (old pods keep answering while they stop) or set in place
// (a per-domain failover), authority restarts, partitions of one
// agent (dropped or stalled by internal/tcpproxy), and an operator nemesis:
// revocations of a cluster's or a pod's leases, forgotten clusters, and
// hostile callers (releases and declarations as another cluster or by an
// identity with no role, epochs far out of step), which the authority,
// serving mTLS with an authorization file as in production, must refuse;
// while every engine
// answers a stream of concurrent AdmissionReviews. Every admitted request is
// recorded with the time its Admit call began and ended and the fencing
// token it was stamped with, and Check looks for a violation in each
// domain on its own. A failing
// history prints its seed; FENCEGATE_SAFETY_SEED=<seed> replays its
// schedule, FENCEGATE_SAFETY_RUNS=<n> runs n histories instead of the short
// default, and FENCEGATE_SAFETY_REPLICAS=<n> fixes the pods per cluster.
package safety
