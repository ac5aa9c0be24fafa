// Package sidebyside measures fencegate's admission webhook side by side
// with the set-up people use today, OPA's own server answering AdmissionReviews as in
// OPA's Kubernetes admission-control tutorial, in one run on one machine.
//
// It starts fencegate as deployed (a fence authority and two real control
// planes, each served by `fencegate run`: east holds the fence, west is
// fenced) and one `opa run --server` per fence state with the shipped
// policies, the same data.fence and data.fencegate.config, and the tutorial's
// `package system` envelope. Both serve TLS. The same load generator sends
// both the same realistic AdmissionReviews of Components: as fast as a fixed
// number of kept-alive connections go (requests/s at saturation), at a fixed
// rate (latency percentiles), and with a new TLS connection per request
// (connection churn). Every answer is checked against the reference
// evaluation of the shipped policies (enginetest.Reference), so a failed or
// wrong answer is never counted as a success. Rounds alternate between the
// servers; the table printed at the end (and written under Options.Out)
// gives each figure's median and range over the rounds and the ratio
// fencegate / OPA.
//
// Each round also measures two baselines that decide nothing, each a
// process of this binary (ServeFloor): the floor, a Go HTTPS server that
// answers a canned AdmissionReview without decoding anything (what TLS,
// the machine and the load generator cost alone), and the allow-all
// webhook, the same server answering through controller-runtime's
// admission webhook with a handler that allows everything (what reading a
// review the usual Go way costs). The report holds fencegate to the floor
// (requests/s and p99, round by round) with the allow-all webhook's ratios
// beside it.
//
// Run does all of it; test/bench is the command that calls it:
//
//	go -C test/bench run . -o "$PWD/reports"
package sidebyside
