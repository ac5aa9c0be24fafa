package envflag

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func TestApply(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		want    time.Duration
		wantErr string
	}{
		"default when neither is set": {want: 15 * time.Second},
		"environment sets the flag": {
			env:  map[string]string{"FENCEGATE_LEASE_TTL": "20s"},
			want: 20 * time.Second,
		},
		"command line wins over environment": {
			args: []string{"--lease-ttl=30s"},
			env:  map[string]string{"FENCEGATE_LEASE_TTL": "20s"},
			want: 30 * time.Second,
		},
		"bad value names the variable": {
			env:     map[string]string{"FENCEGATE_LEASE_TTL": "soon"},
			wantErr: `FENCEGATE_LEASE_TTL="soon" (for --lease-ttl)`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cmd := &cobra.Command{Use: "authority"}
			ttl := cmd.Flags().Duration("lease-ttl", 15*time.Second, "lease length")
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := Apply(cmd, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Apply error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if *ttl != tc.want {
				t.Errorf("lease-ttl = %v, want %v", *ttl, tc.want)
			}
		})
	}
}

func TestDocumentNamesEveryVariableOnce(t *testing.T) {
	root := &cobra.Command{Use: "root"}
	root.PersistentFlags().String("log-level", "info", "log level")
	sub := &cobra.Command{Use: "sub"}
	sub.Flags().String("data-dir", "", "where data lives")
	root.AddCommand(sub)

	Document(root)
	Document(root)

	for flag, want := range map[*pflag.Flag]string{
		root.PersistentFlags().Lookup("log-level"): "log level [$FENCEGATE_LOG_LEVEL]",
		sub.Flags().Lookup("data-dir"):             "where data lives [$FENCEGATE_DATA_DIR]",
	} {
		if flag.Usage != want {
			t.Errorf("usage of --%s = %q, want %q", flag.Name, flag.Usage, want)
		}
	}
}

// TestPrefixKeepsCommandsApart: a command with a prefix of its own reads
// only its own variables for the flags it defines, and its subcommands
// inherit them; flags of the root keep the plain prefix.
func TestPrefixKeepsCommandsApart(t *testing.T) {
	env := map[string]string{
		"FENCEGATE_EPOCH":          "7",
		"FENCEGATE_FENCE_TIMEOUT":  "3s",
		"FENCEGATE_LOG_LEVEL":      "debug",
		"FENCEGATE_FENCE_INSTANCE": "pod-a",
	}
	root := &cobra.Command{Use: "fencegate"}
	logLevel := root.PersistentFlags().String("log-level", "info", "log level")
	fence := &cobra.Command{Use: "fence"}
	SetPrefix(fence, "FENCEGATE_FENCE_")
	timeout := fence.PersistentFlags().Duration("timeout", 10*time.Second, "timeout")
	release := &cobra.Command{Use: "release"}
	epoch := release.Flags().Uint64("epoch", 0, "epoch")
	instance := release.Flags().String("instance", "", "instance")
	root.AddCommand(fence)
	fence.AddCommand(release)
	if err := release.ParseFlags(nil); err != nil { // as cobra does before running it
		t.Fatal(err)
	}
	if err := Apply(release, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if *epoch != 0 {
		t.Errorf("--epoch = %d: the fence command read FENCEGATE_EPOCH, a fencegate run setting", *epoch)
	}
	if *instance != "pod-a" || *timeout != 3*time.Second {
		t.Errorf("--instance %q, --timeout %s: want FENCEGATE_FENCE_INSTANCE and FENCEGATE_FENCE_TIMEOUT", *instance, *timeout)
	}
	if *logLevel != "debug" {
		t.Errorf("--log-level = %q: the root's flags keep the plain prefix", *logLevel)
	}
	Document(root)
	if u := release.Flags().Lookup("epoch").Usage; u != "epoch [$FENCEGATE_FENCE_EPOCH]" {
		t.Errorf("usage of --epoch = %q", u)
	}
}
