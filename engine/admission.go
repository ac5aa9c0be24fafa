package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/valyala/fastjson"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fencestate"
)

// The AdmissionReview version the engine decodes.
const (
	admissionAPIVersion = "admission.k8s.io/v1"
	admissionKind       = "AdmissionReview"
)

// AdmissionRequest holds the fields of an AdmissionReview request that the
// webhook answers with and logs.
type AdmissionRequest struct {
	// UID identifies the request; the response must echo it.
	UID string
	// Operation is CREATE, UPDATE, DELETE or CONNECT.
	Operation string
	// Namespace and Name name the object.
	Namespace, Name string
	// SubResource is "status" for status updates, else empty.
	SubResource string
	// Username and Groups are the requesting user.
	Username string
	Groups   []string
	// DryRun is true for requests that persist nothing.
	DryRun bool
}

// AdmissionResult is a decision with what it was made from.
type AdmissionResult struct {
	// Request is the decoded request; set whenever the body could be
	// decoded, also when evaluation then failed.
	Request AdmissionRequest
	// Decision is the policy's answer.
	Decision AdmissionDecision
	// Domain is the fence domain of the object (of the one deleted, for a
	// DELETE), and Fence its state as the policy saw it.
	Domain string
	Fence  fencestate.State
	// FromDomain is, for an UPDATE that moves the object into Domain from
	// another domain, that domain; empty otherwise. Decision then is both
	// domains' (see moving).
	FromDomain string
	// Revision is the policy revision that decided.
	Revision string
}

// RequestError reports a request body that is not an AdmissionReview the
// engine can evaluate; the webhook answers it with 400 Bad Request.
type RequestError struct {
	msg string
}

func (e *RequestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &RequestError{msg: fmt.Sprintf(format, args...)}
}

// keyBuffers hold decision-cache keys while they are looked up.
var keyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// parsers are reused across requests; a parser's values are only valid until
// its next use, so nothing a request returns points into them.
var parsers fastjson.ParserPool

// Admit decodes an AdmissionReview (admission.k8s.io/v1, JSON) and evaluates
// data.fencegate.admission.decision for it. Errors are a *RequestError for a
// body that is not a valid AdmissionReview, ErrNotReady before the first
// fence state, or an evaluation error.
//
// This is the webhook's hot path (see the package documentation): its
// decisions and errors are those of OPA evaluating the whole policy with
// the whole AdmissionReview as input.
func (e *Engine) Admit(ctx context.Context, body []byte) (AdmissionResult, error) {
	now := e.clock.Now()
	v := e.current.Load()
	review, err := parseReview(body, v.reads)
	if err != nil {
		return AdmissionResult{}, err
	}
	defer review.release()
	var res AdmissionResult
	if res.Request, err = decodeRequest(review.request()); err != nil {
		return res, err
	}
	var from string
	if res.Domain, from, err = e.domainsOf(ctx, review.request(), res.Request); err != nil {
		return res, err
	}
	res.Revision = v.policy.revision
	var evaluated bool
	if res.Decision, res.Fence, evaluated, err = v.decide(ctx, res.Domain, review, now); err != nil {
		return res, err
	}
	if from != "" {
		res.FromDomain = from
		out, _, outEvaluated, err := v.decide(ctx, from, review, now)
		if err != nil {
			return res, err
		}
		res.Decision = moving(res.Decision, out, from)
		evaluated = evaluated || outEvaluated
	}
	e.recent.record(body, evaluated, now)
	return res, nil
}

// decide answers a parsed AdmissionReview with the snapshot of domain d
// that applies at now, and returns the state it saw.
func (v *view) decide(ctx context.Context, d string, review *parsedReview, now time.Time) (AdmissionDecision, fencestate.State, bool, error) {
	snap, err := v.snapshot(d).at(ctx, now)
	if err != nil {
		return AdmissionDecision{}, fencestate.State{}, false, err
	}
	if !snap.hasFence {
		return AdmissionDecision{}, snap.fence, false, fmt.Errorf("domain %s: %w", d, ErrNotReady)
	}
	decision, evaluated, err := snap.decide(ctx, review, now)
	return decision, snap.fence, evaluated, err
}

// domainsOf returns the fence domain of the request's object (the old
// object, for a DELETE) and, for an UPDATE whose old object is in another
// domain, that one.
func (e *Engine) domainsOf(ctx context.Context, request *fastjson.Value, req AdmissionRequest) (to, from string, err error) {
	object := request.Get("object")
	if object == nil || object.Type() == fastjson.TypeNull {
		object = request.Get("oldObject")
	}
	label, err := domainLabel(object, "object")
	if err != nil {
		return "", "", err
	}
	if to, err = e.domains.Of(ctx, req.Namespace, label); err != nil {
		return "", "", err
	}
	old := request.Get("oldObject")
	if req.Operation != "UPDATE" || old == nil || old.Type() == fastjson.TypeNull {
		return to, "", nil
	}
	oldLabel, err := domainLabel(old, "oldObject")
	if err != nil || oldLabel == label {
		return to, "", err
	}
	if from, err = e.domains.Of(ctx, req.Namespace, oldLabel); err != nil || from == to {
		return to, "", err
	}
	return to, from, nil
}

// domainLabel is the domain.Label of object (request.field); "" when it
// has none.
func domainLabel(object *fastjson.Value, field string) (string, error) {
	v := object.Get("metadata", "labels", domain.Label)
	if v == nil || v.Type() == fastjson.TypeNull {
		return "", nil
	}
	b, err := v.StringBytes()
	if err != nil {
		return "", badRequest("request.%s.metadata.labels[%q] is a JSON %s: want a string", field, domain.Label, v.Type())
	}
	return string(b), nil
}

// moving is the decision on a change that moves an object into a domain
// (into: that domain's decision) out of another one (out, fromDomain's):
// it is allowed only when both domains' policies allow it. A cluster that
// does not hold the old domain must not take its objects away by
// relabelling them, nor one that does not hold the new domain bring them
// in. The patch (the fencing token stamped) is the new domain's.
func moving(into, out AdmissionDecision, fromDomain string) AdmissionDecision {
	d := AdmissionDecision{
		Allowed:    into.Allowed && out.Allowed,
		Reason:     into.Reason,
		Reasons:    slices.Clone(into.Reasons),
		Warnings:   slices.Clone(into.Warnings),
		Violations: slices.Clone(into.Violations),
		Patch:      into.Patch,
	}
	for _, r := range out.Reasons {
		d.Reasons = append(d.Reasons, fmt.Sprintf("moving the object out of fence domain %s: %s", fromDomain, r))
	}
	for _, w := range out.Warnings {
		if !slices.Contains(d.Warnings, w) {
			d.Warnings = append(d.Warnings, w)
		}
	}
	for _, v := range out.Violations {
		d.Violations = append(d.Violations, fmt.Sprintf("moving the object out of fence domain %s: %s", fromDomain, v))
	}
	// The reason is that of the refusing side, or of both when they agree.
	switch {
	case into.Allowed:
		d.Reason = out.Reason
	case !out.Allowed && out.Reason != into.Reason:
		d.Reason = ""
	}
	if !d.Allowed {
		d.Patch = nil
	}
	return d
}

// decide answers a parsed AdmissionReview from the decisions the snapshot
// remembers, or else by evaluating its admission query; evaluated says
// which. When the residual policy fails, the request is evaluated again
// with the policy as written, so that the decision, or the error naming
// the author's file and rule, is the one the policy as written gives.
func (s *snapshot) decide(ctx context.Context, review *parsedReview, now time.Time) (d AdmissionDecision, evaluated bool, err error) {
	parsed, err := review.reading(s.inputPaths)
	if err != nil {
		return d, false, err
	}
	var key *[]byte
	if s.cache != nil {
		key = keyBuffers.Get().(*[]byte)
		defer keyBuffers.Put(key)
		*key = appendKey((*key)[:0], parsed, s.inputPaths)
		if d, ok := s.cache.get(*key); ok {
			return d, false, nil
		}
	}
	d, err = s.evalAdmission(ctx, s.admission, project(parsed, s.inputPaths), now)
	if err != nil && s.residual != nil {
		// Not remembered: the policy as written reads more of the request
		// than the residual's key holds.
		whole, parseErr := review.reading(s.policy.inputPaths)
		if parseErr != nil {
			return d, true, parseErr
		}
		d, err = s.evalAdmission(ctx, s.policy.admission, project(whole, s.policy.inputPaths), now)
		return d, true, err
	}
	if err == nil && s.cache != nil {
		s.cache.put(*key, d)
	}
	return d, true, err
}

// checkEnvelope checks that review is an AdmissionReview the engine
// decodes.
func checkEnvelope(review *fastjson.Value) error {
	if review.Type() != fastjson.TypeObject {
		return badRequest("the request body is a JSON %s: want an AdmissionReview object", review.Type())
	}
	apiVersion, kind := review.Get("apiVersion"), review.Get("kind")
	if apiVersion == nil || apiVersion.Type() != fastjson.TypeString || string(apiVersion.GetStringBytes()) != admissionAPIVersion {
		return badRequest("apiVersion %s is not supported: send %s AdmissionReviews (admissionReviewVersions: [v1])", jsonOf(apiVersion), admissionAPIVersion)
	}
	if kind == nil || kind.Type() != fastjson.TypeString || string(kind.GetStringBytes()) != admissionKind {
		return badRequest("kind %s is not supported: want %s", jsonOf(kind), admissionKind)
	}
	return nil
}

// envelopePaths are the parts of an AdmissionReview that the engine reads
// itself, whatever the policies read: the envelope, the request's fields
// that AdmissionRequest holds, and the domain labels of its objects.
var envelopePaths = func() *pathTree {
	t := &pathTree{}
	for _, path := range [][]string{
		{"apiVersion"}, {"kind"},
		{"request", "uid"}, {"request", "operation"}, {"request", "namespace"}, {"request", "name"},
		{"request", "subResource"}, {"request", "userInfo", "username"}, {"request", "userInfo", "groups"},
		{"request", "dryRun"},
		{"request", "object", "metadata", "labels", domain.Label},
		{"request", "oldObject", "metadata", "labels", domain.Label},
	} {
		t.add(path)
	}
	return t.seal()
}()

// decodeRequest reads the fields of AdmissionRequest from request.
func decodeRequest(request *fastjson.Value) (AdmissionRequest, error) {
	var req AdmissionRequest
	if request == nil || request.Type() == fastjson.TypeNull {
		return req, badRequest("the AdmissionReview has no request")
	}
	if request.Type() != fastjson.TypeObject {
		return req, badRequest("request is a JSON %s: want an object", request.Type())
	}
	var err error
	str := func(keys ...string) string {
		v := request.Get(keys...)
		if v == nil || v.Type() == fastjson.TypeNull || err != nil {
			return ""
		}
		b, typeErr := v.StringBytes()
		if typeErr != nil {
			err = badRequest("request.%s is a JSON %s: want a string", strings.Join(keys, "."), v.Type())
			return ""
		}
		return string(b)
	}
	req.UID = str("uid")
	req.Operation = str("operation")
	req.Namespace = str("namespace")
	req.Name = str("name")
	req.SubResource = str("subResource")
	req.Username = str("userInfo", "username")
	if err != nil {
		return req, err
	}
	if req.UID == "" {
		return req, badRequest("the request has no uid")
	}
	if groups := request.Get("userInfo", "groups"); groups != nil && groups.Type() != fastjson.TypeNull {
		items, typeErr := groups.Array()
		if typeErr != nil {
			return req, badRequest("request.userInfo.groups is a JSON %s: want a list of strings", groups.Type())
		}
		req.Groups = make([]string, len(items))
		for i, item := range items {
			b, typeErr := item.StringBytes()
			if typeErr != nil {
				return req, badRequest("request.userInfo.groups[%d] is a JSON %s: want a string", i, item.Type())
			}
			req.Groups[i] = string(b)
		}
	}
	if dryRun := request.Get("dryRun"); dryRun != nil && dryRun.Type() != fastjson.TypeNull {
		b, typeErr := dryRun.Bool()
		if typeErr != nil {
			return req, badRequest("request.dryRun is a JSON %s: want a boolean", dryRun.Type())
		}
		req.DryRun = b
	}
	return req, nil
}

// jsonOf renders a field's value for an error message.
func jsonOf(v *fastjson.Value) string {
	if v == nil {
		return "(missing)"
	}
	s := v.String()
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return s
}

// evalAdmission evaluates an admission query (the residual's or the policy's)
// with the snapshot's data and reads its decision.
func (s *snapshot) evalAdmission(ctx context.Context, query rego.PreparedEvalQuery, input ast.Value, now time.Time) (AdmissionDecision, error) {
	rs, err := query.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTransaction(s.txn), rego.EvalTime(now))
	if err != nil {
		return AdmissionDecision{}, fmt.Errorf("evaluate %v: %w", admissionEntryPoint, err)
	}
	return admissionDecision(rs)
}

// admissionDecision reads the decision object of a result set.
func admissionDecision(rs rego.ResultSet) (AdmissionDecision, error) {
	value, err := decisionValue(rs, admissionEntryPoint.String())
	if err != nil {
		return AdmissionDecision{}, err
	}
	var d AdmissionDecision
	var ok bool
	if d.Allowed, ok = value["allowed"].(bool); !ok {
		return d, fmt.Errorf("%v: allowed is %s: want a boolean", admissionEntryPoint, describe(value["allowed"]))
	}
	var errs []error
	collect := func(field string) []string {
		list, err := stringList(value, field)
		if err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", admissionEntryPoint, err))
		}
		return list
	}
	switch reason := value["reason"].(type) {
	case nil:
		// Policies written before reasons keep the default.
	case string:
		d.Reason = reason
	default:
		errs = append(errs, fmt.Errorf("%v: reason is %s: want a string", admissionEntryPoint, describe(reason)))
	}
	d.Reasons = collect("reasons")
	d.Warnings = collect("warnings")
	d.Violations = collect("violations")
	if d.Patch, err = patchOperations(value["patch"]); err != nil {
		errs = append(errs, fmt.Errorf("%v: %w", admissionEntryPoint, err))
	}
	return d, errors.Join(errs...)
}

// reconcileDecision reads the decision object of a result set.
func reconcileDecision(rs rego.ResultSet) (ReconcileDecision, error) {
	value, err := decisionValue(rs, reconcileEntryPoint.String())
	if err != nil {
		return ReconcileDecision{}, err
	}
	var d ReconcileDecision
	var ok bool
	if d.Hold, ok = value["hold"].(bool); !ok {
		return d, fmt.Errorf("%v: hold is %s: want a boolean", reconcileEntryPoint, describe(value["hold"]))
	}
	if d.Reason, ok = value["reason"].(string); !ok || d.Reason == "" {
		return d, fmt.Errorf("%v: reason is %s: want a condition reason", reconcileEntryPoint, describe(value["reason"]))
	}
	if d.Message, ok = value["message"].(string); !ok {
		return d, fmt.Errorf("%v: message is %s: want a string", reconcileEntryPoint, describe(value["message"]))
	}
	return d, nil
}

func decisionValue(rs rego.ResultSet, entry string) (map[string]any, error) {
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, fmt.Errorf("%s is undefined: the policies must define it for every input", entry)
	}
	if len(rs) > 1 {
		return nil, fmt.Errorf("%s has %d values: want one", entry, len(rs))
	}
	value, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is %s: want an object", entry, describe(rs[0].Expressions[0].Value))
	}
	return value, nil
}

func stringList(value map[string]any, field string) ([]string, error) {
	raw, present := value[field]
	if !present || raw == nil {
		return nil, nil
	}
	items, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is %s: want a list of strings", field, describe(raw))
	}
	if len(items) == 0 {
		return nil, nil
	}
	list := make([]string, len(items))
	for i, item := range items {
		if list[i], ok = item.(string); !ok {
			return nil, fmt.Errorf("%s[%d] is %s: want a string", field, i, describe(item))
		}
	}
	return list, nil
}

func patchOperations(raw any) ([]PatchOperation, error) {
	if raw == nil {
		return nil, nil
	}
	items, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("patch is %s: want a list of JSONPatch operations", describe(raw))
	}
	if len(items) == 0 {
		return nil, nil
	}
	ops := make([]PatchOperation, len(items))
	for i, item := range items {
		op, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("patch[%d] is %s: want a JSONPatch operation object", i, describe(item))
		}
		ops[i].Op, _ = op["op"].(string)
		switch ops[i].Op {
		case "add", "replace", "test":
			if _, present := op["value"]; !present {
				return nil, fmt.Errorf("patch[%d]: a %q operation needs a value", i, ops[i].Op)
			}
		case "remove":
		default:
			return nil, fmt.Errorf("patch[%d]: op is %s: want add, remove, replace or test", i, describe(op["op"]))
		}
		if ops[i].Path, ok = op["path"].(string); !ok {
			return nil, fmt.Errorf("patch[%d]: path is %s: want a JSON pointer string", i, describe(op["path"]))
		}
		ops[i].Value = op["value"]
	}
	return ops, nil
}

// describe names a decoded value for an error message.
func describe(v any) string {
	if v == nil {
		return "missing or null"
	}
	return fmt.Sprintf("%s %s", jsonKind(v), jsonText(v))
}
