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
// Run does all of it; test/bench is the command that calls it:
//
//	go run ./test/bench -o reports
package sidebyside
