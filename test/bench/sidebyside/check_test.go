package sidebyside

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestCheckerRejectsEveryWrongAnswer(t *testing.T) {
	reviews := testReviews(t)
	active, fenced := testExpected(t, stateActive, reviews), testExpected(t, stateFenced, reviews)
	create := reviews[0].UID                           // a CREATE: the holder adds the annotations map
	allowed := func(*admissionv1.AdmissionResponse) {} // as built: allowed, nothing else
	denied := func(r *admissionv1.AdmissionResponse) {
		r.Allowed = false
		r.Result = &metav1.Status{Code: http.StatusForbidden, Message: fenced[validate][create].message}
	}
	patched := func(r *admissionv1.AdmissionResponse) {
		jp := admissionv1.PatchTypeJSONPatch
		r.PatchType, r.Patch = &jp, mustJSON(active[mutate][create].patch)
	}
	tests := map[string]struct {
		endpoint endpoint
		want     expected
		code     int
		edit     func(*admissionv1.AdmissionResponse)
		body     string // replaces the AdmissionReview when set
		wantErr  string // empty: the answer is right
	}{
		"allowed as expected":      {endpoint: validate, want: active[validate], edit: allowed},
		"denied as expected":       {endpoint: validate, want: fenced[validate], edit: denied},
		"patched as expected":      {endpoint: mutate, want: active[mutate], edit: patched},
		"fenced: mutate denies":    {endpoint: mutate, want: fenced[mutate], edit: denied},
		"fenced but mutate allows": {endpoint: mutate, want: fenced[mutate], edit: allowed, wantErr: "allowed=true, want false"},
		"allowed but must deny":    {endpoint: validate, want: fenced[validate], edit: allowed, wantErr: "allowed=true, want false"},
		"denied but must allow":    {endpoint: validate, want: active[validate], edit: denied, wantErr: "allowed=false, want true"},
		"denied with another message": {endpoint: validate, want: fenced[validate], edit: func(r *admissionv1.AdmissionResponse) {
			denied(r)
			r.Result.Message = "denied"
		}, wantErr: "want code 403 and message"},
		"denied without a status": {endpoint: validate, want: fenced[validate], edit: func(r *admissionv1.AdmissionResponse) {
			denied(r)
			r.Result = nil
		}, wantErr: "want code 403"},
		"patch missing": {endpoint: mutate, want: active[mutate], edit: allowed, wantErr: "patchType <nil>, want JSONPatch"},
		"patch where none": {endpoint: mutate, want: fenced[mutate], edit: func(r *admissionv1.AdmissionResponse) {
			denied(r)
			patched(r)
		}, wantErr: "want none"},
		"patch on validate": {endpoint: validate, want: active[validate], edit: patched, wantErr: "answered a patch"},
		"another patch": {endpoint: mutate, want: active[mutate], edit: func(r *admissionv1.AdmissionResponse) {
			patched(r)
			r.Patch = []byte(`[{"op":"add","path":"/metadata/annotations","value":{"fencegate.dev/epoch":"2"}}]`)
		}, wantErr: "patch [{"},
		"unexpected warning": {endpoint: validate, want: active[validate], edit: func(r *admissionv1.AdmissionResponse) {
			r.Warnings = []string{"careful"}
		}, wantErr: "warnings"},
		"uid never sent": {endpoint: validate, want: active[validate], edit: func(r *admissionv1.AdmissionResponse) {
			r.UID = "not-sent"
		}, wantErr: `uid "not-sent" is not one that was sent`},
		"HTTP error":         {endpoint: validate, want: active[validate], code: http.StatusInternalServerError, body: "boom", wantErr: "HTTP 500"},
		"not JSON":           {endpoint: validate, want: active[validate], body: "<html>", wantErr: "not an AdmissionReview"},
		"no response":        {endpoint: validate, want: active[validate], body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, wantErr: "no response"},
		"wrong API version":  {endpoint: validate, want: active[validate], body: `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{}}`, wantErr: "want admission.k8s.io/v1"},
		"OPA's v1 data API":  {endpoint: validate, want: active[validate], body: `{"result":{"apiVersion":"admission.k8s.io/v1"}}`, wantErr: "want admission.k8s.io/v1 AdmissionReview"},
		"undefined decision": {endpoint: validate, want: active[validate], code: http.StatusNotFound, body: `{"code":"undefined_document"}`, wantErr: "HTTP 404"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			body := []byte(tc.body)
			if tc.body == "" {
				resp := &admissionv1.AdmissionResponse{UID: types.UID(create), Allowed: true}
				tc.edit(resp)
				var err error
				body, err = json.Marshal(admissionv1.AdmissionReview{
					TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp,
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			code := tc.code
			if code == 0 {
				code = http.StatusOK
			}
			c := newChecker(tc.endpoint, tc.want)
			// Twice: the second time the answer may be known already,
			// which must not let a wrong one through.
			for range 2 {
				err := c.check(code, body)
				switch {
				case tc.wantErr == "" && err != nil:
					t.Fatalf("a right answer was refused: %v", err)
				case tc.wantErr != "" && err == nil:
					t.Fatalf("a wrong answer was accepted: %s", body)
				case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
					t.Fatalf("error %q does not say %q", err, tc.wantErr)
				}
			}
		})
	}
}

func TestExpectRefusesDataThatDoNotExerciseThePath(t *testing.T) {
	reviews := testReviews(t)
	tests := map[string]struct {
		state   string
		allowed bool
		wantErr string
	}{
		"holder allows":        {state: stateActive, allowed: true},
		"fenced denies":        {state: stateFenced, allowed: false},
		"holder said to deny":  {state: stateActive, allowed: false, wantErr: "decide allowed=true, want false"},
		"fenced said to allow": {state: stateFenced, allowed: true, wantErr: "decide allowed=false, want true"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ref, err := newReference(t.Context(), testStates[tc.state].fence, testConfig)
			if err != nil {
				t.Fatal(err)
			}
			_, err = expect(t.Context(), ref, reviews, tc.allowed)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}
