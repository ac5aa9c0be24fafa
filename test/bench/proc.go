package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc (USER_HZ), 100 on every
// architecture Linux exposes it for.
const userHZ = 100

// memory is what a process's status says of its resident memory.
type memory struct {
	// Peak is the peak resident set size (VmHWM); Anon and File are the
	// resident anonymous memory (heap, stacks) and file-backed pages (the
	// binary's code and read-only data, mostly) now.
	Peak, Anon, File uint64
}

// readMemory reads a process's resident memory from /proc/<pid>/status.
func readMemory(pid int) (memory, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, fmt.Errorf("read the status of process %d: %w", pid, err)
	}
	return parseMemory(status)
}

// parseMemory reads VmHWM, RssAnon and RssFile from the text of
// /proc/<pid>/status.
func parseMemory(status []byte) (memory, error) {
	fields := map[string]*uint64{}
	var m memory
	fields["VmHWM"], fields["RssAnon"], fields["RssFile"] = &m.Peak, &m.Anon, &m.File
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		dst := fields[key]
		if !ok || dst == nil {
			continue
		}
		value := strings.Fields(rest)
		if len(value) != 2 || value[1] != "kB" {
			return m, fmt.Errorf("%s line %q: want <number> kB", key, sc.Text())
		}
		kb, err := strconv.ParseUint(value[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s line %q: %w", key, sc.Text(), err)
		}
		*dst = kb << 10
		delete(fields, key)
	}
	if len(fields) > 0 {
		return m, fmt.Errorf("the process status has no %s line", strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
	}
	return m, nil
}

// procStat is what the bench reads from /proc/<pid>/stat.
type procStat struct {
	ppid int
	// cpu is the user and system time of all the process's threads.
	cpu time.Duration
}

// cpuTime returns the CPU time (user and system, all threads) a process has
// used; pid 0 means this process.
func cpuTime(pid int) (time.Duration, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	stat, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	st, err := parseStat(stat)
	return st.cpu, err
}

// descendantsCPU returns the CPU time used by the processes descending from
// pid (its children, theirs, …), not counting pid itself.
func descendantsCPU(pid int) (time.Duration, error) {
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	stats := map[int]procStat{}
	children := map[int][]int{}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended while listing
		}
		st, err := parseStat(raw)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		p, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		stats[p] = st
		children[st.ppid] = append(children[st.ppid], p)
	}
	var total time.Duration
	queue := slices.Clone(children[pid])
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		total += stats[p].cpu
	}
	return total, nil
}

// parseStat reads the parent pid and the CPU time (utime + stime) from the
// text of /proc/<pid>/stat. The command name (field 2) may hold spaces and
// parentheses, so the fields are counted from its closing parenthesis.
func parseStat(stat []byte) (procStat, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return procStat{}, fmt.Errorf("process stat %q has no command name", truncate(stat))
	}
	fields := strings.Fields(string(stat[end+1:]))
	// fields[0] is field 3 (state), fields[1] field 4 (ppid); utime and
	// stime are fields 14 and 15.
	if len(fields) < 13 {
		return procStat{}, fmt.Errorf("process stat has %d fields after the name: want at least 13", len(fields))
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return procStat{}, fmt.Errorf("process stat parent pid %q: %w", fields[1], err)
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("process stat CPU time %q: %w", f, err)
		}
		ticks += n
	}
	return procStat{ppid: ppid, cpu: time.Duration(ticks) * time.Second / userHZ}, nil
}

// machineBusy returns the CPU time all CPUs of the machine spent busy (not
// idle, not waiting for I/O) since boot.
func machineBusy() (time.Duration, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	return parseBusy(line)
}

// parseBusy reads the busy time from the aggregate "cpu" line of /proc/stat:
// user nice system idle iowait irq softirq steal ….
func parseBusy(line []byte) (time.Duration, error) {
	fields := strings.Fields(string(line))
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat starts with %q: want the aggregate cpu line", line)
	}
	var busy uint64
	for i, f := range fields[1:9] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat cpu field %q: %w", f, err)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / userHZ, nil
}

// loadAverage returns the 1-minute load average.
func loadAverage() (float64, error) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, fmt.Errorf("read /proc/loadavg: %w", err)
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return 0, errors.New("/proc/loadavg is empty")
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg %q: %w", raw, err)
	}
	return load, nil
}

// findProcess returns the pid of the one process that runs binary with args
// among its arguments, one after the other.
func findProcess(binary string, args ...string) (int, error) {
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	var found []int
	for _, path := range cmdlines {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended while listing
		}
		argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		if len(argv) == 0 || argv[0] != binary || !containsInOrder(argv[1:], args) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		found = append(found, pid)
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("no process runs %s %s", binary, strings.Join(args, " "))
	case 1:
		return found[0], nil
	default:
		return 0, fmt.Errorf("processes %v all run %s %s: want one", found, binary, strings.Join(args, " "))
	}
}

// processFlag returns the value of a flag given as "--name value" or
// "--name=value" on a process's command line.
func processFlag(pid int, name string) (string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "", fmt.Errorf("read the command line of process %d: %w", pid, err)
	}
	argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	return flagValue(argv, name)
}

// flagValue finds a flag's value in argv.
func flagValue(argv []string, name string) (string, error) {
	for i, arg := range argv {
		if value, ok := strings.CutPrefix(arg, name+"="); ok {
			return value, nil
		}
		if arg == name && i+1 < len(argv) {
			return argv[i+1], nil
		}
	}
	return "", fmt.Errorf("the command line %q has no %s", strings.Join(argv, " "), name)
}

// containsInOrder reports whether want appears in argv, one after the other.
func containsInOrder(argv, want []string) bool {
	if len(want) == 0 {
		return true
	}
	for i := range argv {
		if i+len(want) <= len(argv) && slices.Equal(argv[i:i+len(want)], want) {
			return true
		}
	}
	return false
}
