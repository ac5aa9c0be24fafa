// Package engine embeds OPA: it loads, compiles and hot-reloads the fence
// policies, holds the data they read (data.fence and data.fencegate.config),
// and evaluates the admission, reconcile and hold decisions.
//
// Its decisions and its errors are those of OPA evaluating the policies as
// written, with the whole AdmissionReview as input and the data in OPA's
// own store; enginetest.Reference is that evaluation, and the tests and the
// fuzzer hold the engine to it. What follows is how the engine gets there
// faster on the webhook's hot path, Admit.
//
// The snapshot store (store.go, snapshot.go). A snapshot is one policy
// revision, one fence state, the data document holding both and the
// admission query to evaluate; it never changes. A fence write or a reload
// builds a new snapshot and swaps a pointer, so an evaluation reads the
// snapshot it started with, never waits for a write and never sees half of
// one. The OPA store of the prepared queries holds nothing itself: each
// evaluation is given its snapshot's read transaction.
//
// The residual policy (snapshot.go). When a snapshot is built, the
// admission entry point is partially evaluated with the input unknown:
// everything that depends only on the fence state and the config (which
// branch applies, the messages, the annotations to stamp) is evaluated
// once, and each request evaluates what is left. Rules that depend on the
// request stay rules of the residual, written once each (shallow
// inlining): inlining them would copy every rule that uses a negation once
// per term of its negated conditions' cross product. A heartbeat that changes
// nothing the policies read keeps the residual; once one did, the next
// heartbeats skip partial evaluation and only swap the renewed values into
// the data (snapshot.renewed). Rules whose value may
// conflict on a request are left as references (conflicts.go), so that the
// residual reports a conflict where the policy as written does; when the
// residual fails on a request, the request is evaluated again with the
// policy as written, whose error names the author's file and rule. Without
// a usable residual the policy as written serves every request.
//
// The projection (input.go). Only the parts of the AdmissionReview that the
// query reads become its input, converted from the parsed JSON straight to
// OPA values: a 6 KB UPDATE with managedFields costs more to convert than to
// evaluate, and the shipped policies read a handful of fields. A value keeps
// its type, so type checks and object.get see what they would see in the
// whole review. The compiler's locals that only name a part of input
// (__local1__ = input.request.object, taken out of a call) are read
// through, so that object.get on them still reads just its member.
//
// The reduction (reduce.go). Parsing is cut down the same way: one pass
// checks the body as strictly as JSON (no NaN, no bad escape, no control
// character) and copies out only what the engine and the view's queries
// read, which is all that is parsed. The whole body is parsed only when a
// query reads more: the policy as written after a residual failed, or a
// snapshot built after the view (an expired lease's).
//
// The decision cache (cache.go). A snapshot whose residual calls no
// non-deterministic builtin remembers its decisions by the projected input's
// key, computed without building the projection: requests that differ only
// in what the policy ignores share a decision, and a hit needs no OPA value
// at all.
//
// Hot reload (watch.go, engine.go, check.go). Start watches the policy
// directory and the config files, as a ConfigMap volume updates them. A
// changed revision is compiled and then tried before it serves, as the
// first one is by New, on every entry point and in every fence status: on
// synthetic reviews of each operation and on the last few reviews decided,
// on a Component's reconcile decision and, when kinds are held
// (Options.HoldKinds), on the hold decision of synthetic objects of each
// held kind and of the objects lately decided (holdcheck.go). A revision
// that does not compile or fails its trial, or lacks the hold decision
// while kinds are held, is refused; the last good revision stays in force
// and the error is logged, counted in fencegate_policy_reloads_total and
// shown in PolicyStatus.
package engine
