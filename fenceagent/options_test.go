package fenceagent

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

func TestNewValidatesOptions(t *testing.T) {
	valid := func() Options {
		return Options{
			Client: fencev1.NewFenceServiceClient(nil), Writer: &recordingWriter{log: &storeLog{}},
			ClusterName: "east", ClusterUID: testSelf.UID, Epoch: 1,
		}
	}
	tests := map[string]struct {
		edit func(*Options)
		// wantErr lists what the error must say; empty means valid.
		wantErr []string
	}{
		"defaults fill the rest": {edit: func(*Options) {}},
		"no client":              {edit: func(o *Options) { o.Client = nil }, wantErr: []string{"no fence authority client", "Dial"}},
		"no writer":              {edit: func(o *Options) { o.Writer = nil }, wantErr: []string{"no data.fence writer"}},
		"empty cluster name":     {edit: func(o *Options) { o.ClusterName = "" }, wantErr: []string{"cluster name is empty", "--cluster-name"}},
		"cluster name not a DNS label": {
			edit: func(o *Options) { o.ClusterName = "East_1" }, wantErr: []string{`cluster name "East_1" is not a DNS label`, "lower-case"},
		},
		"domain not a DNS label": {edit: func(o *Options) { o.Domain = "Payments!" }, wantErr: []string{`fence domain "Payments!"`}},
		"empty cluster UID":      {edit: func(o *Options) { o.ClusterUID = "" }, wantErr: []string{"cluster UID is empty", "--cluster-uid", "FENCEGATE_CLUSTER_UID"}},
		"cluster UID with spaces": {
			edit: func(o *Options) { o.ClusterUID = "a b" }, wantErr: []string{`cluster UID "a b" contains spaces`},
		},
		"cluster UID too long": {
			edit: func(o *Options) { o.ClusterUID = strings.Repeat("a", 129) }, wantErr: []string{"129 characters long"},
		},
		"epoch 0":                {edit: func(o *Options) { o.Epoch = 0 }, wantErr: []string{"epoch is 0", "--epoch", "1 or more"}},
		"a pod name as instance": {edit: func(o *Options) { o.Instance = "fencegate-5c7d9f8b6-q2w4e" }},
		"instance with a space": {
			edit: func(o *Options) { o.Instance = "pod 1" }, wantErr: []string{`instance name "pod 1" contains spaces`, "--instance", "FENCEGATE_INSTANCE"},
		},
		"instance too long": {
			edit: func(o *Options) { o.Instance = strings.Repeat("p", 254) }, wantErr: []string{"instance name is 254 characters long"},
		},
		"timeout not below interval": {
			edit:    func(o *Options) { o.DeclareInterval, o.DeclareTimeout = time.Second, time.Second },
			wantErr: []string{"declare timeout 1s is not shorter than the declare interval 1s"},
		},
		"negative margin": {edit: func(o *Options) { o.LeaseMargin = -time.Second }, wantErr: []string{"lease margin -1s is negative"}},
		"every mistake at once": {
			edit:    func(o *Options) { o.ClusterName, o.Epoch = "", 0 },
			wantErr: []string{"cluster name is empty", "epoch is 0"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := valid()
			tc.edit(&opts)
			c, err := New(opts)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if c.opts.Domain != DefaultDomain || c.opts.DeclareInterval != DefaultDeclareInterval ||
					c.opts.DeclareTimeout != DefaultDeclareTimeout || c.opts.LeaseMargin != DefaultLeaseMargin || c.opts.Clock == nil {
					t.Errorf("defaults not applied: %+v", c.opts)
				}
				return
			}
			if err == nil {
				t.Fatal("New accepted invalid options")
			}
			for _, part := range tc.wantErr {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not say %q", err, part)
				}
			}
		})
	}
}

func TestNewRegistersMetricsOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := Options{
		Client: fencev1.NewFenceServiceClient(nil), Writer: &recordingWriter{log: &storeLog{}},
		ClusterName: "east", ClusterUID: testSelf.UID, Epoch: 1, Registerer: reg,
	}
	if _, err := New(opts); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"fencegate_fence_status", "fencegate_fence_declarations_total", "fencegate_fence_declaration_duration_seconds"} {
		if !names[want] {
			t.Errorf("metric %s not registered (got %v)", want, names)
		}
	}
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "one fence agent per registry") {
		t.Errorf("second agent on one registry: %v", err)
	}
}

// TestDefaultInstance: without an instance name, each agent is a new
// instance named after its host, which the authority accepts.
func TestDefaultInstance(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name: %v", err)
	}
	opts := Options{
		Client: fencev1.NewFenceServiceClient(nil), Writer: &recordingWriter{log: &storeLog{}},
		ClusterName: "east", ClusterUID: testSelf.UID, Epoch: 1,
	}
	seen := map[string]bool{}
	for range 3 {
		c, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		name := c.opts.Instance
		suffix, ok := strings.CutPrefix(name, host+"-")
		if !ok || len(suffix) != instanceSuffixLength || rpctypes.ValidateInstance(name) != nil {
			t.Errorf("default instance %q: want %q, a dash and %d random characters", name, host, instanceSuffixLength)
		}
		if seen[name] {
			t.Errorf("two agents got the instance name %q", name)
		}
		seen[name] = true
	}
}
