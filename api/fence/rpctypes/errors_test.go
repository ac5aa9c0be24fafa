package rpctypes

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRefusalRoundTrip(t *testing.T) {
	refused := Refusal(codes.FailedPrecondition, ReasonClusterFenced, "west is fenced", map[string]string{MetadataHolderEpoch: "7"})
	tests := map[string]struct {
		err        error
		wantReason string
		wantEpoch  uint64
	}{
		"a refusal":                     {err: refused, wantReason: ReasonClusterFenced, wantEpoch: 7},
		"a wrapped refusal":             {err: fmt.Errorf("declare: %w", refused), wantReason: ReasonClusterFenced, wantEpoch: 7},
		"a status without ErrorInfo":    {err: status.Error(codes.Unavailable, "down")},
		"a plain error":                 {err: errors.New("boom")},
		"another domain's ErrorInfo":    {err: otherDomain(t)},
		"no error":                      {},
		"a malformed number reads as 0": {err: Refusal(codes.FailedPrecondition, ReasonAcquiring, "m", map[string]string{MetadataHolderEpoch: "x"}), wantReason: ReasonAcquiring},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			info := ErrorInfo(tc.err)
			if got := info.GetReason(); got != tc.wantReason {
				t.Fatalf("reason %q, want %q", got, tc.wantReason)
			}
			if got := Uint(info.GetMetadata(), MetadataHolderEpoch); got != tc.wantEpoch {
				t.Errorf("holder epoch %d, want %d", got, tc.wantEpoch)
			}
		})
	}
	if st, ok := Status(fmt.Errorf("x: %w", refused)); !ok || st.Code() != codes.FailedPrecondition || st.Message() != "west is fenced" {
		t.Errorf("Status of a wrapped refusal = %v, %v", st, ok)
	}
}

func otherDomain(t *testing.T) error {
	t.Helper()
	st, err := status.New(codes.FailedPrecondition, "m").WithDetails(&errdetails.ErrorInfo{Reason: ReasonClusterFenced, Domain: "example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}
