package fenceagent

import (
	"errors"
	"os"
	"slices"
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
		"empty cluster name":     {edit: func(o *Options) { o.ClusterName = "" }, wantErr: []string{"cluster name is empty", "set Options.ClusterName"}},
		"cluster name not a DNS label": {
			edit: func(o *Options) { o.ClusterName = "East_1" }, wantErr: []string{`cluster name "East_1" is not a DNS label`, "lower-case"},
		},
		"domain not a DNS label": {edit: func(o *Options) { o.Domain = "Payments!" }, wantErr: []string{`fence domain "Payments!"`}},
		"empty cluster UID":      {edit: func(o *Options) { o.ClusterUID = "" }, wantErr: []string{"cluster UID is empty", "set Options.ClusterUID"}},
		"cluster UID with spaces": {
			edit: func(o *Options) { o.ClusterUID = "a b" }, wantErr: []string{`cluster UID "a b" contains spaces`},
		},
		"cluster UID too long": {
			edit: func(o *Options) { o.ClusterUID = strings.Repeat("a", 129) }, wantErr: []string{"129 characters long"},
		},
		"epoch 0":                {edit: func(o *Options) { o.Epoch = 0 }, wantErr: []string{"epoch is 0", "set Options.Epoch to 1 or more"}},
		"a pod name as instance": {edit: func(o *Options) { o.Instance = "fencegate-5c7d9f8b6-q2w4e" }},
		"instance with a space": {
			edit: func(o *Options) { o.Instance = "pod 1" }, wantErr: []string{`instance name "pod 1" contains spaces`, "set Options.Instance"},
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

// TestOptionsValidate: Validate checks the settings without a client or a
// writer, reports every problem at once, and names the settings at fault
// so that a program can name them its own way.
func TestOptionsValidate(t *testing.T) {
	valid := func() Options { return Options{ClusterName: "east", ClusterUID: testSelf.UID, Epoch: 1} }
	// flag names each setting as a command line would.
	flag := func(s Setting) string { return "--" + strings.ToLower(string(s)) }
	type problem struct {
		settings []Setting
		// message is what Describe says with flag's names.
		message string
	}
	tests := map[string]struct {
		edit func(*Options)
		want []problem
	}{
		"valid without a client or writer": {edit: func(*Options) {}},
		"zero durations take the defaults": {edit: func(o *Options) { o.DeclareInterval, o.DeclareTimeout, o.LeaseMargin = 0, 0, 0 }},
		"zero interval takes the default, which the timeout must be below": {
			edit: func(o *Options) { o.DeclareInterval, o.DeclareTimeout = 0, DefaultDeclareInterval },
			want: []problem{{[]Setting{SettingDeclareTimeout, SettingDeclareInterval},
				"declare timeout 5s is not shorter than the declare interval 5s: lower --declaretimeout or raise --declareinterval"}},
		},
		"every setting wrong at once, in the order of the fields": {
			edit: func(o *Options) {
				o.Domain, o.ClusterName, o.ClusterUID, o.Epoch, o.Instance = "Payments!", "", "a b", 0, "pod 1"
				o.DeclareInterval, o.DeclareTimeout, o.LeaseMargin = -time.Second, -time.Second, -2*time.Second
			},
			want: []problem{
				{[]Setting{SettingDomain}, `fence domain "Payments!" is not a DNS label`},
				{[]Setting{SettingClusterName}, "cluster name is empty: set --clustername to this cluster's name"},
				{[]Setting{SettingClusterUID}, `cluster UID "a b" contains spaces or control characters: set --clusteruid to this cluster's identity`},
				{[]Setting{SettingEpoch}, "epoch is 0: epochs start at 1: set --epoch to 1 or more"},
				{[]Setting{SettingInstance}, `instance name "pod 1" contains spaces or control characters: set --instance to this process's pod name`},
				{[]Setting{SettingDeclareInterval}, "declare interval -1s is negative: set --declareinterval to a positive duration such as 5s"},
				{[]Setting{SettingDeclareTimeout}, "declare timeout -1s is negative: set --declaretimeout to a positive duration such as 3s"},
				{[]Setting{SettingLeaseMargin}, "lease margin -2s is negative: set --leasemargin to a positive duration such as 2s"},
			},
		},
		"cluster name not a DNS label": {
			edit: func(o *Options) { o.ClusterName = "East_1" },
			want: []problem{{[]Setting{SettingClusterName}, `cluster name "East_1" is not a DNS label`}},
		},
		"empty cluster UID": {
			edit: func(o *Options) { o.ClusterUID = "" },
			want: []problem{{[]Setting{SettingClusterUID}, "cluster UID is empty"}},
		},
		"cluster UID too long": {
			edit: func(o *Options) { o.ClusterUID = strings.Repeat("a", 129) },
			want: []problem{{[]Setting{SettingClusterUID}, "cluster UID is 129 characters long"}},
		},
		"instance too long": {
			edit: func(o *Options) { o.Instance = strings.Repeat("p", 254) },
			want: []problem{{[]Setting{SettingInstance}, "instance name is 254 characters long"}},
		},
		"timeout above the interval": {
			edit: func(o *Options) { o.DeclareInterval, o.DeclareTimeout = time.Second, 2*time.Second },
			want: []problem{{[]Setting{SettingDeclareTimeout, SettingDeclareInterval}, "declare timeout 2s is not shorter than the declare interval 1s"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := valid()
			tc.edit(&opts)
			err := opts.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var got SettingErrors
			if !errors.As(err, &got) {
				t.Fatalf("Validate() = %v, want SettingErrors", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Validate() found %d problems, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, want := range tc.want {
				if !slices.Equal(got[i].Settings, want.settings) {
					t.Errorf("problem %d names %v, want %v", i, got[i].Settings, want.settings)
				}
				if msg := got[i].Describe(flag); !strings.Contains(msg, want.message) {
					t.Errorf("problem %d says %q, want %q", i, msg, want.message)
				}
				// Error names the Options fields.
				if msg := got[i].Error(); !strings.Contains(msg, "Options."+string(want.settings[0])) {
					t.Errorf("problem %d: Error() = %q does not name Options.%s", i, msg, want.settings[0])
				}
			}
		})
	}
}

// TestSettingErrorUnwrap: a setting the authority checks too keeps the
// rule's own error, naming the gRPC field.
func TestSettingErrorUnwrap(t *testing.T) {
	err := Options{ClusterName: "east", ClusterUID: testSelf.UID}.Validate()
	var fe *rpctypes.FieldError
	if !errors.As(err, &fe) || fe.Field != rpctypes.FieldEpoch {
		t.Fatalf("Validate() = %v, want the epoch's *rpctypes.FieldError inside", err)
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
