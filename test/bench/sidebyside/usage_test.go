package sidebyside

import (
	"os"
	"strings"
	"testing"
)

func TestThisProcessIsMeasurable(t *testing.T) {
	mem, err := readMemory(os.Getpid())
	if err != nil || mem.Peak == 0 || mem.Anon == 0 || mem.File == 0 {
		t.Fatalf("memory of this process: %+v, %v", mem, err)
	}
	if cpu, err := cpuTime(0); err != nil || cpu <= 0 {
		t.Fatalf("CPU time of this process: %v, %v", cpu, err)
	}
	if busy, err := machineBusy(); err != nil || busy <= 0 {
		t.Fatalf("busy time of the machine: %v, %v", busy, err)
	}
	if load, err := loadAverage(); err != nil || load < 0 {
		t.Fatalf("load average: %v, %v", load, err)
	}
	if _, err := descendantsCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	pid, err := findProcess(os.Args[0], os.Args[1:]...)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("findProcess found %d (%v), want this process %d", pid, err, os.Getpid())
	}
	for _, arg := range os.Args[1:] {
		if name, value, ok := strings.Cut(arg, "="); ok {
			if got, err := processFlag(os.Getpid(), name); err != nil || got != value {
				t.Errorf("%s of this process: %q, %v; want %q", name, got, err, value)
			}
			break
		}
	}
	if _, err := processFlag(os.Getpid(), "--no-such-flag"); err == nil {
		t.Error("a flag this process was not given was found")
	}
	if _, err := findProcess(os.Args[0], "--no-such-flag"); err == nil || !strings.Contains(err.Error(), "no process runs") {
		t.Fatalf("findProcess of a command nobody runs: %v", err)
	}
}

func TestContainsInOrder(t *testing.T) {
	argv := []string{"run", "--cluster-name", "east", "--epoch", "1"}
	tests := map[string]struct {
		want []string
		ok   bool
	}{
		"nothing":       {want: nil, ok: true},
		"flag and name": {want: []string{"--cluster-name", "east"}, ok: true},
		"other name":    {want: []string{"--cluster-name", "west"}},
		"not adjacent":  {want: []string{"--cluster-name", "--epoch"}},
		"past the end":  {want: []string{"1", "2"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := containsInOrder(argv, tc.want); got != tc.ok {
				t.Errorf("containsInOrder(%q) = %t, want %t", tc.want, got, tc.ok)
			}
		})
	}
}

// checkErr fails the test unless err says wantErr (or is nil when wantErr
// is empty).
func checkErr(t *testing.T, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case wantErr != "" && err == nil:
		t.Fatalf("no error, want one saying %q", wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Fatalf("error %q does not say %q", err, wantErr)
	}
}

func TestFlagValue(t *testing.T) {
	argv := []string{"/bin/fencegate", "run", "--config-file", "/etc/fencegate/config.yaml", "--epoch=3", "--leader-elect"}
	tests := map[string]struct {
		name    string
		want    string
		wantErr string
	}{
		"separate value": {name: "--config-file", want: "/etc/fencegate/config.yaml"},
		"with equals":    {name: "--epoch", want: "3"},
		"no value":       {name: "--leader-elect", wantErr: "has no --leader-elect"},
		"absent":         {name: "--policy-dir", wantErr: "has no --policy-dir"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := flagValue(argv, tc.name)
			checkErr(t, err, tc.wantErr)
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
