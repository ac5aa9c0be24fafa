package authority_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/internal/testcerts"
)

// The identities of the tests of authorization, as SPIFFE IDs in client
// certificates.
const (
	eastID   = "spiffe://example.org/fencegate/cluster/east"
	westID   = "spiffe://example.org/fencegate/cluster/west"
	oncallID = "spiffe://example.org/fencegate/operator/oncall"
	boardID  = "spiffe://example.org/fencegate/dashboard"
	otherID  = "spiffe://example.org/intruder"
)

// westBinding lets west's identity act as west in the default domain.
const westBinding = `  - identity: ` + westID + `
    cluster: west
    domains: [default]
`

const authorizationFile = `clusters:
  - identity: ` + eastID + `
    cluster: east
    domains: ["*"]
` + westBinding + `operators:
  - ` + oncallID + `
readers:
  - ` + boardID + `
`

// securedAuthority is a real authority serving mTLS with an authorization
// file, and a client for each identity of the tests.
type securedAuthority struct {
	*authoritytest.Server
	file    string
	reg     *prometheus.Registry
	clock   *clocktesting.FakeClock
	clients map[string]fencev1.FenceServiceClient
	ca      *testcerts.CA
}

func startSecured(t testing.TB, opts authoritytest.Options) *securedAuthority {
	return startMTLS(t, opts, authorizationFile)
}

// startMTLS starts the authority with mTLS, authorizing calls by an
// authorization file with content, and letting every caller make every call
// if content is empty.
func startMTLS(t testing.TB, opts authoritytest.Options, content string) *securedAuthority {
	t.Helper()
	ca, serving, err := testcerts.Loopback("authority-ca")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ca.MutualTLS(serving)
	if err != nil {
		t.Fatal(err)
	}
	s := &securedAuthority{
		file:    filepath.Join(t.TempDir(), "authorization.yaml"),
		reg:     prometheus.NewRegistry(),
		clock:   clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)),
		clients: map[string]fencev1.FenceServiceClient{},
		ca:      ca,
	}
	if err := os.WriteFile(s.file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.TLS = serverTLS
	opts.Registerer, opts.Clock = s.reg, s.clock
	if content != "" {
		opts.AuthorizationFile = s.file
	}
	s.Server = authoritytest.Start(t, opts)
	for _, id := range []string{eastID, westID, oncallID, boardID, otherID} {
		s.clients[id] = s.client(t, ca, id)
	}
	return s
}

// client is a client that presents a certificate ca signed for identity.
func (s *securedAuthority) client(t testing.TB, ca *testcerts.CA, identity string) fencev1.FenceServiceClient {
	t.Helper()
	cfg, err := ca.ClientTLS(identity)
	if err != nil {
		t.Fatal(err)
	}
	// Trust the authority's CA, whichever CA signed the client's.
	cfg.RootCAs = s.ca.Pool()
	return s.ClientTLS(t, cfg)
}

// clientOf is a client that presents a certificate the authority's CA
// signed for subject.
func (s *securedAuthority) clientOf(t testing.TB, subject testcerts.Subject) fencev1.FenceServiceClient {
	t.Helper()
	pair, err := s.ca.ClientOf(subject)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.ca.ClientConfig(pair)
	if err != nil {
		t.Fatal(err)
	}
	return s.ClientTLS(t, cfg)
}

// rewrite replaces the authorization file as editors and the kubelet do:
// written beside it and renamed over it.
func (s *securedAuthority) rewrite(t testing.TB, content string) {
	t.Helper()
	tmp := s.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.file); err != nil {
		t.Fatal(err)
	}
}

// eventually waits until cond holds, or fails the test.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEveryRoleAgainstEveryRPC calls every RPC as every role, through real
// mTLS, and checks the answer: allowed calls reach the fence (and get its
// answer), refused ones are PermissionDenied with an ErrorInfo that names
// the identity, the method, the cluster and the domain.
func TestEveryRoleAgainstEveryRPC(t *testing.T) {
	s := startSecured(t, authoritytest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	instance := "east-1"
	calls := map[string]func(fencev1.FenceServiceClient) error{
		"declare east": func(c fencev1.FenceServiceClient) error {
			_, err := c.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1, Instance: "east-1"})
			return err
		},
		"declare west": func(c fencev1.FenceServiceClient) error {
			_, err := c.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "west", ClusterUid: "uid-west", Epoch: 1})
			return err
		},
		"declare west in payments": func(c fencev1.FenceServiceClient) error {
			_, err := c.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{Domain: "payments", ClusterName: "west", ClusterUid: "uid-west", Epoch: 1})
			return err
		},
		"release east": func(c fencev1.FenceServiceClient) error {
			_, err := c.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1, Instance: "east-2"})
			return err
		},
		"release without a cluster name": func(c fencev1.FenceServiceClient) error {
			_, err := c.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{ClusterUid: "uid-east", Epoch: 1, Instance: "east-2"})
			return err
		},
		"get": func(c fencev1.FenceServiceClient) error {
			_, err := c.GetFence(ctx, &fencev1.GetFenceRequest{})
			return err
		},
		"watch": func(c fencev1.FenceServiceClient) error {
			stream, err := c.WatchFence(ctx, &fencev1.WatchFenceRequest{})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		},
		"history": func(c fencev1.FenceServiceClient) error {
			_, err := c.GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{})
			return err
		},
		"revoke an instance": func(c fencev1.FenceServiceClient) error {
			_, err := c.RevokeFence(ctx, &fencev1.RevokeFenceRequest{ClusterName: "east", Instance: &instance})
			return err
		},
		"forget west": func(c fencev1.FenceServiceClient) error {
			_, err := c.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{ClusterName: "west", ClusterUid: "uid-west"})
			return err
		},
	}
	// The fence first: east holds it with two instances, west was seen.
	for _, req := range []*fencev1.DeclareClusterEpochRequest{
		{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1, Instance: "east-1"},
		{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1, Instance: "east-2"},
	} {
		if _, err := s.clients[eastID].DeclareClusterEpoch(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.clients[westID].DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "west", ClusterUid: "uid-west", Epoch: 1}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("west declares: %v, want fenced", err)
	}

	type want struct {
		// code is the answer's code; OK for allowed calls that succeed.
		code codes.Code
		// says is part of the message.
		says string
	}
	allowed := want{code: codes.OK}
	fenced := want{code: codes.FailedPrecondition, says: "is fenced"}
	denied := func(says string) want { return want{code: codes.PermissionDenied, says: says} }
	tests := []struct {
		identity, call string
		want           want
	}{
		{eastID, "declare east", allowed},
		{eastID, "declare west", denied(`identity "` + eastID + `" may act only as cluster east; this call declares west`)},
		{eastID, "release east", allowed},
		{eastID, "release without a cluster name", denied("ReleaseFence names no cluster_name")},
		{eastID, "get", allowed},
		{eastID, "watch", allowed},
		{eastID, "history", denied("GetFenceHistory needs an operator or a reader")},
		{eastID, "revoke an instance", denied("RevokeFence needs an operator")},
		{eastID, "forget west", denied("ForgetCluster needs an operator")},
		{westID, "declare west", fenced},
		{westID, "declare east", denied("may act only as cluster west; this call declares east")},
		{westID, "declare west in payments", denied(`only in domains default; this call is in domain "payments"`)},
		{westID, "release east", denied("may act only as cluster west; this call releases the fence of east")},
		{oncallID, "declare east", denied("is an operator, not bound to a cluster")},
		{oncallID, "release east", denied("an operator revokes leases (fencegate fence revoke) and never releases them")},
		{oncallID, "get", allowed},
		{oncallID, "watch", allowed},
		{oncallID, "history", allowed},
		{oncallID, "revoke an instance", allowed},
		{oncallID, "forget west", allowed},
		{boardID, "get", allowed},
		{boardID, "watch", allowed},
		{boardID, "history", allowed},
		{boardID, "declare east", denied("is a reader, not bound to a cluster")},
		{boardID, "revoke an instance", denied("is a reader: it may read, watch and read the history; RevokeFence needs an operator")},
		{boardID, "forget west", denied("ForgetCluster needs an operator")},
		{otherID, "get", denied("has no role in the authorization file")},
		{otherID, "watch", denied("has no role in the authorization file")},
		{otherID, "declare east", denied("has no role in the authorization file")},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s %s", tc.identity[strings.LastIndexByte(tc.identity, '/')+1:], tc.call), func(t *testing.T) {
			err := calls[tc.call](s.clients[tc.identity])
			st := status.Convert(err)
			if st.Code() != tc.want.code || !strings.Contains(st.Message(), tc.want.says) {
				t.Fatalf("%v, want %s saying %q", err, tc.want.code, tc.want.says)
			}
			if tc.want.code != codes.PermissionDenied {
				return
			}
			info := errorInfo(err)
			md := info.GetMetadata()
			if info.GetDomain() != rpctypes.ErrorDomain || info.GetReason() != rpctypes.ReasonPermissionDenied ||
				md[rpctypes.MetadataIdentity] != tc.identity || !strings.HasPrefix(md[rpctypes.MetadataMethod], "/fencegate.fence.v1.FenceService/") ||
				md[rpctypes.MetadataDomain] == "" {
				t.Errorf("ErrorInfo %v: want %s/%s naming the identity, the method and the domain", info, rpctypes.ErrorDomain, rpctypes.ReasonPermissionDenied)
			}
		})
	}
	// Every refusal is counted by method; none reached the fence.
	for method, want := range map[string]float64{"DeclareClusterEpoch": 6, "ReleaseFence": 3, "GetFenceHistory": 1, "RevokeFence": 2, "ForgetCluster": 2, "GetFence": 1, "WatchFence": 1} {
		if got, _ := metricValue(s.reg, "fencegate_authority_permission_denied_total", "method", method); got != want {
			t.Errorf("permission_denied_total{method=%s} = %v, want %v", method, got, want)
		}
	}
	fence, err := s.clients[oncallID].GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h := fence.GetFence().GetHolder(); h.GetClusterName() != "east" || h.GetEpoch() != 1 {
		t.Errorf("holder %v: refused calls changed the fence", h)
	}

	t.Run("a certificate of another CA is refused at the handshake", func(t *testing.T) {
		other, err := testcerts.NewCA("other-ca")
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.client(t, other, eastID).GetFence(ctx, &fencev1.GetFenceRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("GetFence = %v, want Unavailable (no TLS session)", err)
		}
	})
}

// TestAuthorizationFileReload: the authority follows its file; a broken
// file leaves the last good one in force.
func TestAuthorizationFileReload(t *testing.T) {
	s := startSecured(t, authoritytest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := func(id string) error {
		_, err := s.clients[id].GetFence(ctx, &fencev1.GetFenceRequest{})
		return err
	}
	if err := read(otherID); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the intruder reads: %v", err)
	}
	s.rewrite(t, authorizationFile+"  - "+otherID+"\n")
	eventually(t, "the new reader reads", func() bool { return read(otherID) == nil })

	s.rewrite(t, "readers: [")
	eventually(t, "the failed reload is counted", func() bool {
		v, _ := metricValue(s.reg, "fencegate_authority_authorization_reloads_total", "result", "error")
		return v >= 1
	})
	if err := read(otherID); err != nil {
		t.Errorf("after a broken file the last good one must stay in force: %v", err)
	}
	s.rewrite(t, authorizationFile)
	eventually(t, "the reader is gone again", func() bool { return status.Code(read(otherID)) == codes.PermissionDenied })
	if err := read(boardID); err != nil {
		t.Errorf("the dashboard reads: %v", err)
	}
}

// TestOperatorActionsAreRecordedWithTheirIdentity: the history names who
// made each change, as the transport saw it, and WatchFence events do too.
func TestOperatorActionsAreRecordedWithTheirIdentity(t *testing.T) {
	s := startSecured(t, authoritytest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := s.clients[boardID].WatchFence(ctx, &fencev1.WatchFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the snapshot
		t.Fatal(err)
	}
	if _, err := s.clients[eastID].DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.clients[oncallID].RevokeFence(ctx, &fencev1.RevokeFenceRequest{ClusterName: "east"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		typ      fencev1.FenceEventType
		identity string
	}{{fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED, eastID}, {fencev1.FenceEventType_FENCE_EVENT_TYPE_REVOKED, oncallID}} {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetType() != want.typ || ev.GetActor().GetIdentity() != want.identity {
			t.Errorf("event %s by %v, want %s by %s", ev.GetType(), ev.GetActor(), want.typ, want.identity)
		}
	}
	hist, err := s.clients[boardID].GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range hist.GetEvents() {
		got = append(got, fmt.Sprintf("%s by %s via %s", ev.GetType(), ev.GetActor().GetIdentity(), ev.GetActor().GetMethod()))
	}
	want := []string{
		"FENCE_HISTORY_EVENT_TYPE_GRANTED by " + eastID + " via " + fencev1.FenceService_DeclareClusterEpoch_FullMethodName,
		"FENCE_HISTORY_EVENT_TYPE_REVOKED by " + oncallID + " via " + fencev1.FenceService_RevokeFence_FullMethodName,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("history:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestIdentitiesAreTyped: a certificate's URI SANs, DNS SANs and common
// name are identities of three kinds, and a DNS SAN or a common name counts
// only where the authorization file names it with its kind (dns:, cn:). A
// certificate whose DNS SAN or common name spells the operator's SPIFFE ID
// is not the operator, and one that two entries of the file name is
// refused, not given either role.
func TestIdentitiesAreTyped(t *testing.T) {
	const oncallDNS = "oncall.example.org"
	tests := map[string]struct {
		subject testcerts.Subject
		// operators are listed as operators besides oncallID.
		operators []string
		// identity is who the authority takes the caller for: in the
		// refusal's ErrorInfo, or in the history of the revocation.
		identity string
		// refused is part of the refusal; empty means the revocation is
		// allowed.
		refused string
	}{
		"the operator's URI SAN": {
			subject: testcerts.Subject{URIs: []string{oncallID}}, identity: oncallID,
		},
		"a DNS SAN that spells the operator's SPIFFE ID": {
			subject: testcerts.Subject{DNSNames: []string{oncallID}}, identity: "dns:" + oncallID, refused: "has no role",
		},
		"a common name that spells it": {
			subject: testcerts.Subject{CommonName: oncallID}, identity: "cn:" + oncallID, refused: "has no role",
		},
		"a DNS SAN the file names as dns:": {
			subject: testcerts.Subject{DNSNames: []string{oncallID}, CommonName: oncallID}, operators: []string{"dns:" + oncallID}, identity: "dns:" + oncallID,
		},
		"a common name the file names as cn:": {
			subject: testcerts.Subject{CommonName: "Oncall Team", DNSNames: []string{oncallDNS}}, operators: []string{"cn:Oncall Team"}, identity: "cn:Oncall Team",
		},
		"a URI SAN the file names as uri:": {
			subject: testcerts.Subject{URIs: []string{otherID}}, operators: []string{"uri:" + otherID}, identity: otherID,
		},
		"a certificate two entries name": {
			subject: testcerts.Subject{URIs: []string{otherID}, DNSNames: []string{oncallDNS}}, operators: []string{otherID, "dns:" + oncallDNS},
			identity: otherID, refused: "names 2 identities the authorization file names",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var extra strings.Builder
			for _, id := range tc.operators {
				fmt.Fprintf(&extra, "  - %q\n", id)
			}
			s := startMTLS(t, authoritytest.Options{Quiet: true}, strings.Replace(authorizationFile, "operators:\n", "operators:\n"+extra.String(), 1))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := s.clients[eastID].DeclareClusterEpoch(ctx, declareReq("", "east", 1)); err != nil {
				t.Fatal(err)
			}
			_, err := s.clientOf(t, tc.subject).RevokeFence(ctx, &fencev1.RevokeFenceRequest{ClusterName: "east"})
			if tc.refused != "" {
				if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), tc.refused) {
					t.Fatalf("RevokeFence = %v, want PermissionDenied saying %q", err, tc.refused)
				}
				if got := errorInfo(err).GetMetadata()[rpctypes.MetadataIdentity]; got != tc.identity {
					t.Errorf("refused as %q, want %q", got, tc.identity)
				}
				return
			}
			if err != nil {
				t.Fatalf("RevokeFence = %v, want it allowed as %s", err, tc.identity)
			}
			hist, err := s.clients[oncallID].GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{})
			if err != nil {
				t.Fatal(err)
			}
			events := hist.GetEvents()
			last := events[len(events)-1]
			if last.GetType() != fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_REVOKED || last.GetActor().GetIdentity() != tc.identity {
				t.Errorf("last history entry %s by %q, want a revocation by %q", last.GetType(), last.GetActor().GetIdentity(), tc.identity)
			}
		})
	}
}
