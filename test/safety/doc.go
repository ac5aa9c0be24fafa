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
// domain on its own.
//
// Each history also runs what fencegate acts on (world_test.go): on every
// cluster, objects of every kind the shipped hold policy holds, each with
// an actuator that acts only while its object, as its own delayed view
// shows it, is not suspended; a hold controller that applies the pod's
// real data.fencegate.hold.decision with hold.Plan on every fence
// transition, one patch at a time, and holds until State.ResumeAtNS; the
// handover order (a holder told CLUSTER_FENCED releases only once every
// object of the domain is held and quiet, fenceagent.Options.AwaitHandover,
// and its membership Lease no longer publishes its hold,
// Options.BeforeRelease); and a gated writer modelled on package gate,
// which decides each write by the written object's own domain. Every
// action is recorded with its start, end, cluster, domain and token, and
// CheckActions fails a history in which two clusters acted for one domain
// at overlapping times, or a cluster acted under a token the authority's
// own history (GetFenceHistory) did not grant it, or past the next grant
// (plus the takeover grace after an expiry). CheckLinearizable checks the
// agents' declarations and releases, as their clients saw them, with
// Porcupine against a model of the fence per domain. The nemeses of
// actions: a holder whose Lease writes fail, a hold policy reloaded
// broken, a namespace relabelled between domains, a failover and back;
// each history is shaped for one scenario (its seed modulo the
// scenarios), and a run of 20 or more fails when a nemesis never reached
// the case it exists for. A failing
// history prints its seed; FENCEGATE_SAFETY_SEED=<seed> replays its
// schedule, FENCEGATE_SAFETY_RUNS=<n> runs n histories instead of the short
// default, and FENCEGATE_SAFETY_REPLICAS=<n> fixes the pods per cluster.
package safety
