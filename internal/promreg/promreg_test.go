package promreg

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegister(t *testing.T) {
	newCounter := func(name string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: name})
	}
	for _, tc := range []struct {
		name string
		// taken are registered first, so that the same names are refused.
		taken     []string
		register  []string
		nilReg    bool
		wantErr   string
		wantCount int
	}{
		{name: "nil registry registers nowhere", register: []string{"a"}, nilReg: true},
		{name: "all registered", register: []string{"a", "b"}, wantCount: 2},
		{name: "a refusal names the component and the rest still register", taken: []string{"a"}, register: []string{"a", "b"}, wantErr: "register widget metrics: ", wantCount: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			for _, n := range tc.taken {
				reg.MustRegister(newCounter(n))
			}
			var cs []prometheus.Collector
			for _, n := range tc.register {
				cs = append(cs, newCounter(n))
			}
			var r prometheus.Registerer = reg
			if tc.nilReg {
				r = nil
			}
			err := Register(r, "widget", cs...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Register: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr)):
				t.Fatalf("Register: %v, want an error starting %q", err, tc.wantErr)
			case tc.wantErr != "":
				var already prometheus.AlreadyRegisteredError
				if !errors.As(err, &already) {
					t.Fatalf("Register: %v does not wrap the registry's refusal", err)
				}
			}
			families, gerr := reg.Gather()
			if gerr != nil {
				t.Fatal(gerr)
			}
			if len(families) != tc.wantCount {
				t.Fatalf("%d metric families registered, want %d", len(families), tc.wantCount)
			}
		})
	}
}
