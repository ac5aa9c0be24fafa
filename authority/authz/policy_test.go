package authz

import (
	"strings"
	"testing"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

const (
	eastID     = "spiffe://example.org/fencegate/cluster/east"
	westID     = "spiffe://example.org/fencegate/cluster/west"
	paymentsID = "spiffe://example.org/fencegate/cluster/payments-east"
	oncallID   = "spiffe://example.org/fencegate/operator/oncall"
	boardID    = "spiffe://example.org/fencegate/dashboard"
	otherURI   = "spiffe://example.org/intruder"
)

const testFile = `
clusters:
  - identity: spiffe://example.org/fencegate/cluster/east
    cluster: east
    domains: ["*"]
  - identity: spiffe://example.org/fencegate/cluster/west
    cluster: west
    domains: ["*"]
  - identity: spiffe://example.org/fencegate/cluster/payments-east
    cluster: east
    domains: [payments]
operators:
  - spiffe://example.org/fencegate/operator/oncall
readers:
  - spiffe://example.org/fencegate/dashboard
`

func testPolicy(t testing.TB) *Policy {
	t.Helper()
	p, err := Parse([]byte(testFile))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuthorize(t *testing.T) {
	p := testPolicy(t)
	declare := func(cluster, domain string) Request {
		return Request{Method: MethodDeclare, Cluster: cluster, Domain: domain}
	}
	release := func(cluster string) Request {
		return Request{Method: MethodRelease, Cluster: cluster, Domain: "default"}
	}
	in := func(method, domain string) Request { return Request{Method: method, Domain: domain} }
	tests := map[string]struct {
		identity string
		req      Request
		// wantReason is part of the refusal; empty means allowed.
		wantReason string
	}{
		"a cluster declares as itself":              {identity: eastID, req: declare("east", "default")},
		"a cluster declares as another":             {identity: westID, req: declare("east", "default"), wantReason: `identity "` + westID + `" may act only as cluster west; this call declares east`},
		"a cluster releases as itself":              {identity: eastID, req: release("east")},
		"a cluster releases another's lease":        {identity: westID, req: release("east"), wantReason: "may act only as cluster west; this call releases the fence of east"},
		"a release that names no cluster":           {identity: eastID, req: release(""), wantReason: "ReleaseFence names no cluster_name"},
		"a cluster in one of its domains":           {identity: paymentsID, req: declare("east", "payments")},
		"a cluster outside its domains":             {identity: paymentsID, req: declare("east", "default"), wantReason: `only in domains payments; this call is in domain "default"`},
		"a cluster reads its fence":                 {identity: eastID, req: in(MethodGet, "default")},
		"a cluster watches its fence":               {identity: eastID, req: in(MethodWatch, "default")},
		"a cluster reads outside its domains":       {identity: paymentsID, req: in(MethodGet, "default"), wantReason: `this call reads domain "default"`},
		"a cluster reads the history":               {identity: eastID, req: in(MethodHistory, "default"), wantReason: "GetFenceHistory needs an operator or a reader"},
		"a cluster revokes":                         {identity: eastID, req: in(MethodRevoke, "default"), wantReason: "RevokeFence needs an operator"},
		"a cluster forgets":                         {identity: eastID, req: in(MethodForget, "default"), wantReason: "ForgetCluster needs an operator"},
		"an operator revokes":                       {identity: oncallID, req: in(MethodRevoke, "default")},
		"an operator forgets":                       {identity: oncallID, req: in(MethodForget, "default")},
		"an operator reads, watches, reads history": {identity: oncallID, req: in(MethodHistory, "default")},
		"an operator reads":                         {identity: oncallID, req: in(MethodGet, "payments")},
		"an operator watches":                       {identity: oncallID, req: in(MethodWatch, "payments")},
		"an operator releases":                      {identity: oncallID, req: release("east"), wantReason: "an operator revokes leases (fencegate fence revoke) and never releases them"},
		"an operator declares":                      {identity: oncallID, req: declare("east", "default"), wantReason: "is an operator, not bound to a cluster"},
		"a reader reads":                            {identity: boardID, req: in(MethodGet, "default")},
		"a reader watches":                          {identity: boardID, req: in(MethodWatch, "default")},
		"a reader reads the history":                {identity: boardID, req: in(MethodHistory, "default")},
		"a reader revokes":                          {identity: boardID, req: in(MethodRevoke, "default"), wantReason: "is a reader: it may read, watch and read the history; RevokeFence needs an operator"},
		"a reader declares":                         {identity: boardID, req: declare("east", "default"), wantReason: "is a reader, not bound to a cluster"},
		"an unbound identity":                       {identity: "spiffe://example.org/intruder", req: in(MethodGet, "default"), wantReason: "has no role in the authorization file"},
		"no identity at all":                        {req: declare("east", "default"), wantReason: "has no client identity"},
		"health checking needs no role":             {req: Request{Method: "/grpc.health.v1.Health/Check"}},
		"reflection needs a role":                   {identity: "spiffe://example.org/intruder", req: Request{Method: "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"}, wantReason: "has no role"},
		"reflection for a bound identity":           {identity: boardID, req: Request{Method: "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"}},
		"a method outside the protocol":             {identity: oncallID, req: Request{Method: "/fencegate.fence.v1.FenceService/DropEverything"}, wantReason: "not part of the fence protocol"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := p.Authorize(tc.identity, tc.req)
			if tc.wantReason == "" {
				if !d.Allowed {
					t.Fatalf("refused: %s", d.Reason)
				}
				return
			}
			if d.Allowed {
				t.Fatalf("allowed, want a refusal saying %q", tc.wantReason)
			}
			if !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("reason %q, want it to say %q", d.Reason, tc.wantReason)
			}
		})
	}
}

func TestParseRefusesAmbiguousFiles(t *testing.T) {
	tests := map[string]struct {
		file    string
		wantErr []string
	}{
		"an unknown field": {file: "clusters: []\noperator: [x]\n", wantErr: []string{`unknown field "operator"`}},
		"not YAML":         {file: "clusters: [", wantErr: []string{"parse authorization file"}},
		"one identity, two clusters": {
			file:    "clusters:\n- {identity: 'dns:a', cluster: east, domains: ['*']}\n- {identity: 'dns:a', cluster: west, domains: ['*']}\n",
			wantErr: []string{`clusters[1]: identity "dns:a" is bound to cluster "east" already`},
		},
		"one URI, with and without uri:": {
			file:    "clusters:\n- {identity: 'spiffe://x/a', cluster: east, domains: ['*']}\n- {identity: 'uri:spiffe://x/a', cluster: west, domains: ['*']}\n",
			wantErr: []string{`clusters[1]: identity "uri:spiffe://x/a" is bound to cluster "east" already`},
		},
		"a cluster name that is not a DNS label": {
			file:    "clusters:\n- {identity: 'dns:a', cluster: East_1, domains: ['*']}\n",
			wantErr: []string{"clusters[0] (dns:a): cluster_name: \"East_1\" is not a DNS label"},
		},
		"no domains": {
			file:    "clusters:\n- {identity: 'dns:a', cluster: east}\n",
			wantErr: []string{"clusters[0] (dns:a): domains is empty"},
		},
		"a bad domain": {
			file:    "clusters:\n- {identity: 'dns:a', cluster: east, domains: [Prod]}\n",
			wantErr: []string{"clusters[0] (dns:a): domain: \"Prod\" is not a DNS label"},
		},
		"an empty operator": {file: "operators: ['']\n", wantErr: []string{"operators[0]: identity is empty"}},
		"a cluster that is an operator too": {
			file:    "clusters:\n- {identity: 'cn:a', cluster: east, domains: ['*']}\noperators: ['cn:a']\n",
			wantErr: []string{`identity "cn:a" is both a cluster and an operator`},
		},
		"a bare host name, once a DNS SAN": {
			file:    "clusters:\n- {identity: east.example.org, cluster: east, domains: ['*']}\nreaders: [board.example.org]\n",
			wantErr: []string{`clusters[0]: identity "east.example.org" is not an absolute URI`, `readers[0]: identity "board.example.org" is not an absolute URI`, "write dns:board.example.org"},
		},
		"every mistake at once": {
			file:    "clusters:\n- {identity: '', cluster: east, domains: ['*']}\nreaders: ['']\n",
			wantErr: []string{"clusters[0]: identity is empty", "readers[0]: identity is empty"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file))
			if err == nil {
				t.Fatal("parsed, want an error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
	if _, err := Parse([]byte("")); err != nil {
		t.Errorf("an empty file (nobody may call) is refused: %v", err)
	}
}

// TestDecide: a caller is the one identity of its certificate the file
// names, with its kind: a DNS SAN or a common name counts only where the
// file names it as dns: or cn:, and a certificate the file names twice is
// refused.
func TestDecide(t *testing.T) {
	p, err := Parse([]byte(`
clusters:
  - {identity: "spiffe://example.org/fencegate/cluster/east", cluster: east, domains: ["*"]}
  - {identity: "dns:west.example.org", cluster: west, domains: ["*"]}
operators: ["spiffe://example.org/fencegate/operator/oncall", "cn:Oncall"]
readers: ["uri:spiffe://example.org/fencegate/dashboard"]
`))
	if err != nil {
		t.Fatal(err)
	}
	revoke := Request{Method: MethodRevoke, Domain: "default", Cluster: "east"}
	tests := map[string]struct {
		claims   []string
		req      Request
		identity string
		// wantReason is part of the refusal; empty means allowed.
		wantReason string
	}{
		"the operator's URI SAN":                {claims: []string{oncallID, "cn:" + oncallID}, req: revoke, identity: oncallID},
		"a DNS SAN that spells the operator":    {claims: []string{"dns:" + oncallID}, req: revoke, identity: "dns:" + oncallID, wantReason: "has no role"},
		"a CN that spells the operator":         {claims: []string{"cn:" + oncallID}, req: revoke, identity: "cn:" + oncallID, wantReason: "has no role"},
		"both, and neither is named":            {claims: []string{"dns:" + oncallID, "cn:" + oncallID}, req: revoke, identity: "dns:" + oncallID, wantReason: "nor has any other identity the client certificate names (cn:" + oncallID + ")"},
		"a common name the file names":          {claims: []string{"spiffe://example.org/unbound", "dns:x.example.org", "cn:Oncall"}, req: revoke, identity: "cn:Oncall"},
		"a DNS SAN the file binds to a cluster": {claims: []string{"dns:west.example.org", "cn:west"}, req: Request{Method: MethodDeclare, Domain: "default", Cluster: "west"}, identity: "dns:west.example.org"},
		"a reader the file writes with uri:":    {claims: []string{boardID}, req: Request{Method: MethodGet, Domain: "default"}, identity: boardID},
		"a certificate the file names twice":    {claims: []string{eastID, "cn:Oncall"}, req: revoke, identity: eastID, wantReason: "names 2 identities the authorization file names (" + eastID + ", cn:Oncall)"},
		"health checking, named twice":          {claims: []string{eastID, "cn:Oncall"}, req: Request{Method: "/grpc.health.v1.Health/Check"}, identity: eastID},
		"no certificate":                        {req: revoke, wantReason: "has no client identity"},
		"health checking without a certificate": {req: Request{Method: "/grpc.health.v1.Health/Check"}},
		"an unbound URI SAN and nothing else":   {claims: []string{otherURI}, req: revoke, identity: otherURI, wantReason: `identity "` + otherURI + `" has no role`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			identity, d := p.Decide(tc.claims, tc.req)
			if identity != tc.identity {
				t.Errorf("identity %q, want %q", identity, tc.identity)
			}
			if tc.wantReason == "" {
				if !d.Allowed {
					t.Fatalf("refused: %s", d.Reason)
				}
				return
			}
			if d.Allowed || !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("%+v, want a refusal saying %q", d, tc.wantReason)
			}
		})
	}
}

func TestRequestOf(t *testing.T) {
	// Every request type names its domain, normalized, and the cluster it
	// acts as or on.
	for _, tc := range requestCases() {
		got := RequestOf(tc.method, tc.msg)
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.method, got, tc.want)
		}
	}
}

type requestCase struct {
	method string
	msg    any
	want   Request
}

func requestCases() []requestCase {
	instance := "pod"
	return []requestCase{
		{MethodDeclare, &fencev1.DeclareClusterEpochRequest{ClusterName: "east"}, Request{Method: MethodDeclare, Domain: "default", Cluster: "east"}},
		{MethodRelease, &fencev1.ReleaseFenceRequest{Domain: "payments", ClusterName: "east"}, Request{Method: MethodRelease, Domain: "payments", Cluster: "east"}},
		{MethodRevoke, &fencev1.RevokeFenceRequest{ClusterName: "east", Instance: &instance}, Request{Method: MethodRevoke, Domain: "default", Cluster: "east"}},
		{MethodForget, &fencev1.ForgetClusterRequest{ClusterName: "west"}, Request{Method: MethodForget, Domain: "default", Cluster: "west"}},
		{MethodGet, &fencev1.GetFenceRequest{Domain: "b"}, Request{Method: MethodGet, Domain: "b"}},
		{MethodWatch, &fencev1.WatchFenceRequest{}, Request{Method: MethodWatch, Domain: "default"}},
		{MethodHistory, &fencev1.GetFenceHistoryRequest{}, Request{Method: MethodHistory, Domain: "default"}},
		{"/grpc.health.v1.Health/Check", nil, Request{Method: "/grpc.health.v1.Health/Check"}},
	}
}

// BenchmarkAuthorize measures what the guard adds to an allowed
// declaration once the caller's identity is known: reading the request and
// deciding. BenchmarkDeclareAuthorization in package authority measures the
// whole call, whose etcd transaction dominates.
func BenchmarkAuthorize(b *testing.B) {
	p := testPolicy(b)
	req := &fencev1.DeclareClusterEpochRequest{Domain: "payments", ClusterName: "east", ClusterUid: "uid-east", Epoch: 7}
	for b.Loop() {
		if d := p.Authorize(eastID, RequestOf(fencev1.FenceService_DeclareClusterEpoch_FullMethodName, req)); !d.Allowed {
			b.Fatalf("refused: %s", d.Reason)
		}
	}
}
