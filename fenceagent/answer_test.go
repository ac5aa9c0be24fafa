package fenceagent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

func TestDecode(t *testing.T) {
	req := &fencev1.DeclareClusterEpochRequest{ClusterName: testSelf.Name, ClusterUid: testSelf.UID, Epoch: testSelf.Epoch}
	grant, _ := grantResp(req, 15*time.Second, 42)
	grantGen, _ := grantResp(req, 15*time.Second, 42)
	grantGen.ClusterGeneration = 6
	fenced := refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0)
	otherDomain, _ := status.New(codes.FailedPrecondition, "refused").WithDetails(&errdetails.ErrorInfo{
		Reason: rpctypes.ReasonClusterFenced, Domain: "example.com",
	})

	tests := map[string]struct {
		resp           *fencev1.DeclareClusterEpochResponse
		err            error
		want           answerKind
		wantHolder     fencestate.Cluster
		wantTTL        time.Duration
		wantToken      uint64
		wantRetryAfter time.Duration
		wantReason     string
		wantGeneration uint64
		wantPresented  uint64
		wantHighest    uint64
		wantStep       uint64
	}{
		"OK grants the lease": {
			resp: grant, want: granted, wantHolder: testSelf, wantTTL: 15 * time.Second, wantToken: 42,
		},
		"CLUSTER_FENCED names the holder": {
			err: fenced, want: refusedFenced, wantHolder: testWest, wantReason: rpctypes.ReasonClusterFenced,
		},
		"CLUSTER_FENCED wrapped by a caller": {
			err: fmt.Errorf("declare: %w", fenced), want: refusedFenced, wantHolder: testWest, wantReason: rpctypes.ReasonClusterFenced,
		},
		"CLUSTER_EPOCH_REGRESSED": {
			err: refusalErr(rpctypes.ReasonEpochRegressed, testWest, 7, 0), want: refusedRegressed, wantHolder: testWest, wantReason: rpctypes.ReasonEpochRegressed,
		},
		"FENCE_ACQUIRING carries retry_after_ms": {
			err: refusalErr(rpctypes.ReasonAcquiring, testWest, 9, 1500*time.Millisecond), want: refusedAcquiring,
			wantHolder: testWest, wantRetryAfter: 1500 * time.Millisecond, wantReason: rpctypes.ReasonAcquiring,
		},
		"OK carries the cluster generation": {
			resp: grantGen, want: granted, wantHolder: testSelf, wantTTL: 15 * time.Second, wantToken: 42, wantGeneration: 6,
		},
		"CLUSTER_FENCED carries the cluster generation": {
			err: refusalAt(rpctypes.ReasonClusterFenced, testWest, 7, 0, 6), want: refusedFenced, wantHolder: testWest, wantReason: rpctypes.ReasonClusterFenced, wantGeneration: 6,
		},
		"EPOCH_STEP_TOO_LARGE carries the domain's limits": {
			err: stepRefusal(70000, 8, 1000), want: refusedStep, wantReason: rpctypes.ReasonEpochStepTooLarge, wantHighest: 8, wantStep: 1000,
		},
		"CLUSTER_RESTORED names both generations": {
			err: restoredRefusal(5, 9), want: refusedRestored, wantReason: rpctypes.ReasonClusterRestored, wantGeneration: 9, wantPresented: 5,
		},
		"another refusal keeps its reason": {
			err: refusalErr(rpctypes.ReasonNotHolder, testWest, 7, 0), want: refusedOther, wantHolder: testWest, wantReason: rpctypes.ReasonNotHolder,
		},
		"PERMISSION_DENIED names this agent's identity": {
			err:  rpctypes.Refusal(codes.PermissionDenied, rpctypes.ReasonPermissionDenied, "may act only as west", map[string]string{rpctypes.MetadataIdentity: "spiffe://x/east"}),
			want: refusedPermission, wantReason: rpctypes.ReasonPermissionDenied,
		},
		"ErrorInfo of another domain is unexpected": {
			err: otherDomain.Err(), want: unexpected, wantReason: fencestate.ReasonUnexpectedError,
		},
		"FailedPrecondition without ErrorInfo is unexpected": {
			err: status.Error(codes.FailedPrecondition, "no"), want: unexpected, wantReason: fencestate.ReasonUnexpectedError,
		},
		"Unimplemented is unsupported": {
			err: status.Error(codes.Unimplemented, "unknown service"), want: unsupported, wantReason: fencestate.ReasonUnimplemented,
		},
		"wrapped Unimplemented is unsupported": {
			err: fmt.Errorf("call: %w", status.Error(codes.Unimplemented, "unknown service")), want: unsupported, wantReason: fencestate.ReasonUnimplemented,
		},
		"Unavailable is transient":       {err: status.Error(codes.Unavailable, "connection refused"), want: transient},
		"DeadlineExceeded is transient":  {err: status.Error(codes.DeadlineExceeded, "slow"), want: transient},
		"ResourceExhausted is transient": {err: status.Error(codes.ResourceExhausted, "busy"), want: transient},
		"Aborted is transient":           {err: status.Error(codes.Aborted, "conflict"), want: transient},
		"wrapped Unavailable is transient": {
			err: fmt.Errorf("call: %w", status.Error(codes.Unavailable, "down")), want: transient,
		},
		"a context deadline outside gRPC is transient": {
			err: fmt.Errorf("call: %w", context.DeadlineExceeded), want: transient,
		},
		"InvalidArgument is unexpected": {
			err: status.Error(codes.InvalidArgument, "cluster_name: not a DNS label"), want: unexpected, wantReason: fencestate.ReasonUnexpectedError,
		},
		"PermissionDenied is unexpected": {
			err: status.Error(codes.PermissionDenied, "client certificate not allowed"), want: unexpected, wantReason: fencestate.ReasonUnexpectedError,
		},
		"a plain error is unexpected": {
			err: errors.New("boom"), want: unexpected, wantReason: fencestate.ReasonUnexpectedError,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := decode(tc.resp, tc.err)
			if got.kind != tc.want {
				t.Fatalf("kind = %s, want %s", got.kind.result(), tc.want.result())
			}
			if got.holder != tc.wantHolder {
				t.Errorf("holder = %+v, want %+v", got.holder, tc.wantHolder)
			}
			if got.leaseTTL != tc.wantTTL || got.token != tc.wantToken || got.retryAfter != tc.wantRetryAfter {
				t.Errorf("ttl, token, retry after = %s, %d, %s; want %s, %d, %s",
					got.leaseTTL, got.token, got.retryAfter, tc.wantTTL, tc.wantToken, tc.wantRetryAfter)
			}
			if got.generation != tc.wantGeneration || got.presentedGeneration != tc.wantPresented {
				t.Errorf("generation, presented = %d, %d; want %d, %d", got.generation, got.presentedGeneration, tc.wantGeneration, tc.wantPresented)
			}
			if got.highestEpoch != tc.wantHighest || got.maxEpochStep != tc.wantStep {
				t.Errorf("highest epoch, step = %d, %d; want %d, %d", got.highestEpoch, got.maxEpochStep, tc.wantHighest, tc.wantStep)
			}
			if got.reason != tc.wantReason {
				t.Errorf("reason = %q, want %q", got.reason, tc.wantReason)
			}
			if (got.err != nil) != (tc.err != nil) {
				t.Errorf("err = %v, want it kept from %v", got.err, tc.err)
			}
		})
	}
}
