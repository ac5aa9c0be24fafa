package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/engine"
)

// MaxBodyBytes bounds an AdmissionReview body. The API server limits objects
// to about 1.5 MiB; an UPDATE carries two of them.
const MaxBodyBytes = 3 << 20

// bodyBuffers hold request bodies while they are decided; nothing keeps a
// reference to a body after the engine returned.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// endpoint names an admission endpoint: what it answers with.
type endpoint string

const (
	// validate answers with allowed, reasons and warnings.
	validate endpoint = "validate"
	// mutate answers with the patch and warnings, and denies what the
	// validating endpoint denies. The two calls of one change may reach two
	// replicas, which learn of a fence change at slightly different
	// moments: were only validation to deny, a change mutated by a replica
	// that did not hold the fence (so not stamped) could be validated by
	// one that does, and be admitted without the fencing token.
	mutate endpoint = "mutate"
)

// admissionHandler answers AdmissionReviews for one endpoint.
type admissionHandler struct {
	*Server
	endpoint endpoint
}

func (h admissionHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.clock.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.invalid(w, start, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: send AdmissionReviews with POST", r.Method, r.URL.Path))
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if media, _, err := mime.ParseMediaType(ct); err != nil || media != "application/json" {
			h.invalid(w, start, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send application/json", ct))
			return
		}
	}
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer bodyBuffers.Put(buf)
	buf.Reset()
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	body := buf.Bytes()
	if err != nil {
		if maxErr := (*http.MaxBytesError)(nil); errors.As(err, &maxErr) {
			h.invalid(w, start, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes (3 MiB)", MaxBodyBytes))
			return
		}
		h.invalid(w, start, http.StatusBadRequest, fmt.Sprintf("read the request body: %v", err))
		return
	}

	res, err := h.engine.Admit(r.Context(), body)
	if reqErr := (*engine.RequestError)(nil); errors.As(err, &reqErr) {
		h.invalid(w, start, http.StatusBadRequest, reqErr.Error())
		return
	}
	response := h.response(res, err)
	out, marshalErr := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: response,
	})
	if marshalErr != nil {
		// The response holds strings, a bool and JSONPatch values from
		// the policy; they always encode.
		h.invalid(w, start, http.StatusInternalServerError, fmt.Sprintf("encode the response: %v", marshalErr))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out) // the API server hung up; nothing to tell it
	elapsed := h.clock.Since(start)
	h.record(res, response, err, elapsed)
}

// response builds the AdmissionResponse for a decision or an evaluation
// error.
func (h admissionHandler) response(res engine.AdmissionResult, err error) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: types.UID(res.Request.UID)}
	switch {
	case errors.Is(err, engine.ErrNotReady):
		resp.Result = &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
			Message: "fencegate is not ready to decide: " + err.Error(),
		}
		return resp
	case err != nil:
		resp.Result = &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError,
			Message: "fencegate could not evaluate its admission policy: " + err.Error(),
		}
		return resp
	}
	d := res.Decision
	resp.Warnings = d.Warnings
	resp.Allowed = d.Allowed
	if !d.Allowed {
		message := strings.Join(d.Reasons, "; ")
		if message == "" {
			message = "fencegate: denied by data.fencegate.admission.decision, which gave no reason"
		}
		// A policy's own reason (STALE_FENCING_TOKEN) tells a writer what
		// to do; the code stays 403, so that clients still see Forbidden.
		reason := metav1.StatusReasonForbidden
		if d.Reason != "" {
			reason = metav1.StatusReason(d.Reason)
		}
		resp.Result = &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: reason, Message: message,
		}
		return resp
	}
	if h.endpoint == mutate && len(d.Patch) > 0 {
		patch, err := json.Marshal(d.Patch)
		if err != nil {
			return h.response(res, fmt.Errorf("encode the policy's patch: %w", err))
		}
		patchType := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &patchType
	}
	return resp
}

// record writes the decision log line and the metrics of an answered
// request.
func (h admissionHandler) record(res engine.AdmissionResult, resp *admissionv1.AdmissionResponse, err error, elapsed time.Duration) {
	req, d := res.Request, res.Decision
	result := resultAllowed
	switch {
	case err != nil:
		result = resultError
	case !resp.Allowed:
		result = resultDenied
	}
	h.metrics.decisions.WithLabelValues(string(h.endpoint), operationLabel(req.Operation), result, domainLabel(res.Domain, h.engine.Serves)).Inc()
	h.metrics.duration.WithLabelValues(string(h.endpoint)).Observe(elapsed.Seconds())

	kv := []any{
		"endpoint", h.endpoint,
		"uid", req.UID,
		"user", req.Username,
		"groups", req.Groups,
		"operation", req.Operation,
		"namespace", req.Namespace,
		"name", req.Name,
		"subResource", req.SubResource,
		"dryRun", req.DryRun,
		"allowed", resp.Allowed,
		"reasons", d.Reasons,
		"warnings", d.Warnings,
		"violations", d.Violations,
		"patchOperations", len(d.Patch),
		"domain", res.Domain,
		"fenceStatus", res.Fence.Status,
		"epoch", res.Fence.Cluster.Epoch,
		"holder", holder(res),
		"revision", res.Revision,
		"duration", elapsed,
	}
	if res.FromDomain != "" {
		kv = append(kv, "fromDomain", res.FromDomain)
	}
	if err != nil {
		h.log.Error(err, "admission decision", kv...)
		return
	}
	h.log.Info("admission decision", kv...)
}

func holder(res engine.AdmissionResult) string {
	if res.Fence.Holder.Name == "" {
		return ""
	}
	return fmt.Sprintf("%s@%d", res.Fence.Holder.Name, res.Fence.Holder.Epoch)
}

// invalid answers a request that is not an AdmissionReview the webhook can
// evaluate, with an HTTP error saying what is wrong.
func (h admissionHandler) invalid(w http.ResponseWriter, start time.Time, code int, message string) {
	http.Error(w, message, code)
	elapsed := h.clock.Since(start)
	h.metrics.decisions.WithLabelValues(string(h.endpoint), operationLabel(""), resultInvalid, "").Inc()
	h.metrics.duration.WithLabelValues(string(h.endpoint)).Observe(elapsed.Seconds())
	h.log.Info("admission request refused", "endpoint", h.endpoint, "code", code, "error", message, "duration", elapsed)
}
