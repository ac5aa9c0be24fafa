package sidebyside

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/fencegate/fencegate/engine/enginetest"
)

// endpoint is an admission endpoint: what its answers carry.
type endpoint string

const (
	// validate answers allowed, with the denial's message, and warnings.
	validate endpoint = "validate"
	// mutate denies what validate denies, and otherwise answers the
	// JSONPatch and warnings.
	mutate endpoint = "mutate"
)

// answer is what a server must answer for one review at one endpoint.
type answer struct {
	allowed  bool
	message  string
	warnings []string
	patch    []any
}

// expected holds the answer every review must get, by request uid, at one
// endpoint of a server deciding for one fence state.
type expected map[string]answer

// expect decides every review with the reference evaluation and returns
// the answers each endpoint must give. wantAllowed says what the fence state
// must lead to for these CREATEs and UPDATEs: allowed with a patch (the
// fence holder) or denied without one (a fenced cluster); a reference that
// decides otherwise means the reviews or the data do not exercise the path
// they are meant to.
func expect(ctx context.Context, ref *enginetest.Reference, reviews []review, wantAllowed bool) (map[endpoint]expected, error) {
	out := map[endpoint]expected{validate: {}, mutate: {}}
	for _, r := range reviews {
		d, err := ref.Admit(ctx, r.Body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.Operation, r.UID, err)
		}
		switch {
		case d.Allowed != wantAllowed:
			return nil, fmt.Errorf("%s %s: the shipped policies decide allowed=%t, want %t", r.Operation, r.UID, d.Allowed, wantAllowed)
		case wantAllowed && len(d.Patch) == 0:
			return nil, fmt.Errorf("%s %s: the shipped policies stamp nothing while holding the fence", r.Operation, r.UID)
		case !wantAllowed && (len(d.Patch) > 0 || len(d.Reasons) == 0):
			return nil, fmt.Errorf("%s %s: a denial must give a reason and no patch, got reasons %q and patch %v", r.Operation, r.UID, d.Reasons, d.Patch)
		}
		// The patch as a client decodes it from the answer.
		var patch []any
		if len(d.Patch) > 0 {
			if err := json.Unmarshal(mustJSON(d.Patch), &patch); err != nil {
				return nil, fmt.Errorf("%s %s: the decision's patch: %w", r.Operation, r.UID, err)
			}
		}
		out[validate][r.UID] = answer{allowed: d.Allowed, message: strings.Join(d.Reasons, "; "), warnings: d.Warnings}
		out[mutate][r.UID] = answer{allowed: d.Allowed, message: strings.Join(d.Reasons, "; "), warnings: d.Warnings, patch: patch}
	}
	return out, nil
}

// answerCheck verifies one HTTP answer.
type answerCheck interface {
	check(code int, body []byte) error
}

// exactAnswer accepts only status 200 with exactly its bytes: the floor
// server's canned answer.
type exactAnswer []byte

func (a exactAnswer) check(code int, body []byte) error {
	if code != http.StatusOK || !bytes.Equal(body, a) {
		return fmt.Errorf("HTTP %d %s, want 200 %s", code, truncate(body), a)
	}
	return nil
}

// checker verifies every answer of one run. An answer body that was verified
// once is remembered, so that the identical answers of later requests are
// checked by comparing bytes; anything else is decoded and verified in full.
type checker struct {
	endpoint endpoint
	want     expected
	verified map[string]struct{}
}

func newChecker(ep endpoint, want expected) *checker {
	return &checker{endpoint: ep, want: want, verified: map[string]struct{}{}}
}

// check verifies one HTTP answer: status 200 and the AdmissionReview the
// request's uid must get.
func (c *checker) check(code int, body []byte) error {
	if code != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", code, truncate(body))
	}
	if _, ok := c.verified[string(body)]; ok {
		return nil
	}
	if err := c.verify(body); err != nil {
		return err
	}
	c.verified[string(body)] = struct{}{}
	return nil
}

func (c *checker) verify(body []byte) error {
	var got admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &got); err != nil {
		return fmt.Errorf("the answer is not an AdmissionReview: %w: %s", err, truncate(body))
	}
	if got.APIVersion != admissionv1.SchemeGroupVersion.String() || got.Kind != "AdmissionReview" {
		return fmt.Errorf("the answer is apiVersion %q kind %q: want admission.k8s.io/v1 AdmissionReview", got.APIVersion, got.Kind)
	}
	resp := got.Response
	if resp == nil {
		return fmt.Errorf("the answer has no response: %s", truncate(body))
	}
	want, ok := c.want[string(resp.UID)]
	if !ok {
		return fmt.Errorf("the answer's uid %q is not one that was sent", resp.UID)
	}
	if resp.Allowed != want.allowed {
		return fmt.Errorf("uid %s: allowed=%t, want %t", resp.UID, resp.Allowed, want.allowed)
	}
	if !slices.Equal(resp.Warnings, want.warnings) {
		return fmt.Errorf("uid %s: warnings %q, want %q", resp.UID, resp.Warnings, want.warnings)
	}
	if !want.allowed {
		if resp.Result == nil || resp.Result.Code != http.StatusForbidden || resp.Result.Message != want.message {
			return fmt.Errorf("uid %s: denial %+v, want code 403 and message %q", resp.UID, resp.Result, want.message)
		}
	}
	if c.endpoint == validate {
		if len(resp.Patch) > 0 {
			return fmt.Errorf("uid %s: the validating endpoint answered a patch", resp.UID)
		}
		return nil
	}
	return verifyPatch(resp, want.patch)
}

// verifyPatch compares a mutating answer's JSONPatch with the decision's,
// operation by operation.
func verifyPatch(resp *admissionv1.AdmissionResponse, want []any) error {
	if len(want) == 0 {
		if len(resp.Patch) > 0 || resp.PatchType != nil {
			return fmt.Errorf("uid %s: patch %s, want none", resp.UID, resp.Patch)
		}
		return nil
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		return fmt.Errorf("uid %s: patchType %v, want JSONPatch", resp.UID, resp.PatchType)
	}
	var got []any
	if err := json.Unmarshal(resp.Patch, &got); err != nil {
		return fmt.Errorf("uid %s: the patch is not a JSONPatch: %w", resp.UID, err)
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("uid %s: patch %s, want %s", resp.UID, resp.Patch, mustJSON(want))
	}
	return nil
}

func truncate(b []byte) string {
	const limit = 300
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}
