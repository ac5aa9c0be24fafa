package authority_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/internal/testcerts"
)

// streamEndBound is how long after a reload of the authorization file a
// watch that the file no longer allows may still be open: the file
// watch's quiet period, and the margin of a loaded machine.
const streamEndBound = 10 * time.Second

// TestWatchIsAuthorizedAgainOnEveryReload: an open watch is authorized
// again whenever the authorization file is reloaded; once the file no
// longer lets its caller watch the domain, it ends as a refused watch
// would: PermissionDenied, reason PERMISSION_DENIED, counted.
func TestWatchIsAuthorizedAgainOnEveryReload(t *testing.T) {
	tests := map[string]struct {
		identity string
		file     string
		// refused is part of the refusal; empty means the watch goes on.
		refused string
	}{
		"the cluster's identity removed": {
			identity: westID, file: strings.Replace(authorizationFile, westBinding, "", 1), refused: "has no role in the authorization file",
		},
		"the cluster's domains narrowed": {
			identity: westID, file: strings.Replace(authorizationFile, westBinding, strings.Replace(westBinding, "[default]", "[payments]", 1), 1),
			refused: `this call reads domain "default"`,
		},
		"the reader removed": {
			identity: boardID, file: strings.Replace(authorizationFile, "  - "+boardID+"\n", "", 1), refused: "has no role in the authorization file",
		},
		"the reader kept": {
			identity: boardID, file: authorizationFile + "  - " + otherID + "\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := startSecured(t, authoritytest.Options{Quiet: true})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stream, err := s.clients[tc.identity].WatchFence(ctx, &fencev1.WatchFenceRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil { // the snapshot
				t.Fatal(err)
			}
			s.rewrite(t, tc.file)
			rewritten := time.Now()
			if tc.refused == "" {
				eventually(t, "the new file is in force", func() bool {
					_, err := s.clients[otherID].GetFence(ctx, &fencev1.GetFenceRequest{})
					return err == nil
				})
				if _, err := s.clients[eastID].DeclareClusterEpoch(ctx, declareReq("", "east", 1)); err != nil {
					t.Fatal(err)
				}
				ev, err := stream.Recv()
				if err != nil || ev.GetType() != fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED {
					t.Fatalf("after a reload that keeps the reader: %v, %v; want the grant", ev, err)
				}
				return
			}
			err = endWithin(stream, cancel)
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), tc.refused) {
				t.Fatalf("%s after the reload the watch got %v, want PermissionDenied saying %q", time.Since(rewritten), err, tc.refused)
			}
			info := errorInfo(err)
			md := info.GetMetadata()
			if info.GetReason() != rpctypes.ReasonPermissionDenied || md[rpctypes.MetadataIdentity] != tc.identity ||
				md[rpctypes.MetadataMethod] != fencev1.FenceService_WatchFence_FullMethodName || md[rpctypes.MetadataDomain] != "default" {
				t.Errorf("ErrorInfo %v, want %s naming %s, WatchFence and the default domain", info, rpctypes.ReasonPermissionDenied, tc.identity)
			}
			if got, _ := metricValue(s.reg, "fencegate_authority_permission_denied_total", "method", "WatchFence"); got != 1 {
				t.Errorf("permission_denied_total{method=WatchFence} = %v, want 1", got)
			}
		})
	}
}

// TestCertificateExpiryEndsTheCall: a watch ends with Unauthenticated when
// its client certificate expires, by the authority's clock, and no later
// call on the same connection is served; until then both are.
func TestCertificateExpiryEndsTheCall(t *testing.T) {
	s := startSecured(t, authoritytest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Valid by the wall clock for the handshake; x509 keeps whole seconds.
	notAfter := time.Now().Add(time.Hour).Truncate(time.Second)
	board := s.clientOf(t, testcerts.Subject{URIs: []string{boardID}, NotAfter: notAfter})
	stream, err := board.WatchFence(ctx, &fencev1.WatchFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the snapshot
		t.Fatal(err)
	}

	s.clock.SetTime(notAfter.Add(-time.Second))
	if _, err := s.clients[eastID].DeclareClusterEpoch(ctx, declareReq("", "east", 1)); err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetType() != fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED {
		t.Fatalf("a second before the certificate expires the watch got %v, %v; want the grant", ev, err)
	}
	if _, err := board.GetFence(ctx, &fencev1.GetFenceRequest{}); err != nil {
		t.Fatalf("a second before the certificate expires GetFence = %v", err)
	}

	s.clock.SetTime(notAfter)
	wantSays := "the client certificate expired at " + notAfter.UTC().Format(time.RFC3339)
	err = endWithin(stream, cancel)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), wantSays) {
		t.Fatalf("the watch at the certificate's expiry got %v, want Unauthenticated saying %q", err, wantSays)
	}
	if _, err := board.GetFence(ctx, &fencev1.GetFenceRequest{}); status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), wantSays) {
		t.Errorf("GetFence on the connection of the expired certificate = %v, want Unauthenticated saying %q", err, wantSays)
	}
}

// endWithin returns the error that ends stream; if it is still open after
// streamEndBound, cancel ends it and the error is Canceled.
func endWithin(stream fencev1.FenceService_WatchFenceClient, cancel context.CancelFunc) error {
	timer := time.AfterFunc(streamEndBound, cancel)
	defer timer.Stop()
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}
