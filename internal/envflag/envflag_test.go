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
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			ttl := fs.Duration("lease-ttl", 15*time.Second, "lease length")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := Apply(fs, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
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
