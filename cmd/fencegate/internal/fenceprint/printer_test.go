package fenceprint_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	clocktesting "k8s.io/utils/clock/testing"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/cmd/fencegate/internal/fenceprint"
)

// TestPrinters: both formats show the same answer, the table with the
// notes and relative times for people, JSON without the notes.
func TestPrinters(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	fence := &fencev1.Fence{
		Domain:   "payments",
		LeaseTtl: durationpb.New(15 * time.Second),
		Holder: &fencev1.Holder{
			ClusterName: "east", ClusterUid: "uid-east", Epoch: 3, Token: 9,
			AcquireTime: timestamppb.New(now.Add(-time.Minute)), LeaseExpireTime: timestamppb.New(now.Add(-2 * time.Second)),
		},
	}
	tests := map[string]struct {
		format string
		print  func(p fenceprint.Printer) error
		// want are parts of the output; not what must be absent.
		want []string
		not  []string
	}{
		"a note and a fence, table": {
			format: fenceprint.Table,
			print: func(p fenceprint.Printer) error {
				if err := p.Note("Did %s.", "it"); err != nil {
					return err
				}
				return p.Fence(fence)
			},
			want: []string{"Did it.\n\nDomain:", "Holder:     east (uid uid-east) at epoch 3, token 9", "Lease:      ended 2s ago", "Pending:    none", "Lease TTL:  15s"},
		},
		"a note and a fence, JSON": {
			format: fenceprint.JSON,
			print: func(p fenceprint.Printer) error {
				if err := p.Note("Did %s.", "it"); err != nil {
					return err
				}
				return p.Fence(fence)
			},
			want: []string{`"domain": "payments"`, `"lease_remaining_seconds": 0`, `"token": 9`},
			not:  []string{"Did it."},
		},
		"no history, table": {
			format: fenceprint.Table,
			print:  func(p fenceprint.Printer) error { return p.History("payments", nil) },
			want:   []string{"No history recorded in domain payments.\n"},
		},
		"no history, JSON": {
			format: fenceprint.JSON,
			print:  func(p fenceprint.Printer) error { return p.History("payments", nil) },
			want:   []string{"[]\n"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			p, err := fenceprint.New(tc.format, &out, clocktesting.NewFakeClock(now))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.print(p); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("output has %q:\n%s", n, out.String())
				}
			}
		})
	}
}

func TestNewRefusesAnUnknownFormat(t *testing.T) {
	_, err := fenceprint.New("yaml", &bytes.Buffer{}, clocktesting.NewFakeClock(time.Now()))
	if err == nil || !strings.Contains(err.Error(), `--output "yaml": want table or json`) {
		t.Errorf("New(yaml): %v", err)
	}
}
