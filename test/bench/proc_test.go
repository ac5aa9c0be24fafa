package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseMemory(t *testing.T) {
	const others = "Name:\tfencegate\nVmPeak:\t 1 kB\nVmRSS:\t 1 kB\n"
	tests := map[string]struct {
		status  string
		want    memory
		wantErr string
	}{
		"all three":  {status: others + "VmHWM:\t   65536 kB\nRssAnon:\t 2048 kB\nRssFile:\t 1024 kB\n", want: memory{Peak: 64 << 20, Anon: 2 << 20, File: 1 << 20}},
		"missing":    {status: others + "VmHWM:\t   65536 kB\n", wantErr: "no RssAnon, RssFile line"},
		"other unit": {status: "VmHWM:\t 64 MB\n", wantErr: "want <number> kB"},
		"not number": {status: "RssAnon:\t many kB\n", wantErr: "invalid syntax"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseMemory([]byte(tc.status))
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	// Fields 3… of a real stat line: state, ppid, …, utime (14), stime (15).
	const rest = " S 4242 1 1 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 8 0 1 1 1\n"
	tests := map[string]struct {
		stat     string
		wantPPID int
		wantCPU  time.Duration
		wantErr  string
	}{
		"plain name":       {stat: "123 (fencegate)" + rest, wantPPID: 4242, wantCPU: 3 * time.Second},
		"name with parens": {stat: "123 (a) (b) c)" + rest, wantPPID: 4242, wantCPU: 3 * time.Second},
		"no name":          {stat: "123 fencegate S 1", wantErr: "no command name"},
		"truncated":        {stat: "123 (x) S 1 1", wantErr: "want at least 13"},
		"bad time":         {stat: "123 (x) S 1 1 1 0 -1 0 1 0 0 0 x 50 0", wantErr: "CPU time"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.stat))
			checkErr(t, err, tc.wantErr)
			if got.ppid != tc.wantPPID || got.cpu != tc.wantCPU {
				t.Errorf("got ppid %d cpu %s, want %d and %s", got.ppid, got.cpu, tc.wantPPID, tc.wantCPU)
			}
		})
	}
}

func TestParseBusy(t *testing.T) {
	tests := map[string]struct {
		line    string
		want    time.Duration
		wantErr string
	}{
		// user nice system idle iowait irq softirq steal: idle and iowait
		// are not busy.
		"aggregate": {line: "cpu  100 10 50 9000 400 5 5 30 0 0", want: 2 * time.Second},
		"per cpu":   {line: "cpu0 100 10 50 9000 400 5 5 30 0 0", wantErr: "aggregate cpu line"},
		"short":     {line: "cpu 1 2 3", wantErr: "aggregate cpu line"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseBusy([]byte(tc.line))
			checkErr(t, err, tc.wantErr)
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestThisProcessIsMeasurable(t *testing.T) {
	mem, err := readMemory(os.Getpid())
	if err != nil || mem.Peak == 0 || mem.Anon == 0 || mem.File == 0 {
		t.Fatalf("memory of this process: %+v, %v", mem, err)
	}
	if _, err := cpuTime(0); err != nil {
		t.Fatal(err)
	}
	if _, err := descendantsCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := machineBusy(); err != nil {
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
