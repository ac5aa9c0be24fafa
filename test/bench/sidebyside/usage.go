package sidebyside

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// memory is what a process's status says of its resident memory.
type memory struct {
	// Peak is the peak resident set size (VmHWM); Anon and File are the
	// resident anonymous memory (heap, stacks) and file-backed pages (the
	// binary's code and read-only data, mostly) now.
	Peak, Anon, File uint64
}

// procFS is the machine's /proc.
func procFS() (procfs.FS, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return fs, fmt.Errorf("open /proc: %w", err)
	}
	return fs, nil
}

// process returns the process pid of /proc; pid 0 is this process.
func process(pid int) (procfs.Proc, error) {
	fs, err := procFS()
	if err != nil {
		return procfs.Proc{}, err
	}
	if pid == 0 {
		return fs.Self()
	}
	return fs.Proc(pid)
}

// allProcs lists the machine's processes.
func allProcs() (procfs.Procs, error) {
	fs, err := procFS()
	if err != nil {
		return nil, err
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	return procs, nil
}

// readMemory reads a process's resident memory from /proc/<pid>/status.
func readMemory(pid int) (memory, error) {
	p, err := process(pid)
	if err != nil {
		return memory{}, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return memory{}, fmt.Errorf("read the status of process %d: %w", pid, err)
	}
	return memory{Peak: status.VmHWM, Anon: status.RssAnon, File: status.RssFile}, nil
}

// seconds converts /proc's CPU seconds to a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// cpuTime returns the CPU time (user and system, all threads) a process has
// used; pid 0 means this process.
func cpuTime(pid int) (time.Duration, error) {
	p, err := process(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("read the stat of process %d: %w", pid, err)
	}
	return seconds(st.CPUTime()), nil
}

// descendantsCPU returns the CPU time used by the processes descending from
// pid (its children, theirs, …), not counting pid itself.
func descendantsCPU(pid int) (time.Duration, error) {
	procs, err := allProcs()
	if err != nil {
		return 0, err
	}
	cpu := map[int]time.Duration{}
	children := map[int][]int{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // the process ended while listing
		}
		cpu[p.PID] = seconds(st.CPUTime())
		children[st.PPID] = append(children[st.PPID], p.PID)
	}
	var total time.Duration
	queue := slices.Clone(children[pid])
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		total += cpu[p]
	}
	return total, nil
}

// machineBusy returns the CPU time all CPUs of the machine spent busy (not
// idle, not waiting for I/O) since boot.
func machineBusy() (time.Duration, error) {
	fs, err := procFS()
	if err != nil {
		return 0, err
	}
	stat, err := fs.Stat()
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	c := stat.CPUTotal
	return seconds(c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal), nil
}

// loadAverage returns the 1-minute load average.
func loadAverage() (float64, error) {
	fs, err := procFS()
	if err != nil {
		return 0, err
	}
	load, err := fs.LoadAvg()
	if err != nil {
		return 0, fmt.Errorf("read /proc/loadavg: %w", err)
	}
	return load.Load1, nil
}

// cpuModel names the machine's processor, from /proc/cpuinfo.
func cpuModel() string {
	fs, err := procFS()
	if err != nil {
		return "unknown"
	}
	info, err := fs.CPUInfo()
	if err != nil || len(info) == 0 || info[0].ModelName == "" {
		return "unknown"
	}
	return info[0].ModelName
}

// findProcess returns the pid of the one process that runs binary with args
// among its arguments, one after the other.
func findProcess(binary string, args ...string) (int, error) {
	procs, err := allProcs()
	if err != nil {
		return 0, err
	}
	var found []int
	for _, p := range procs {
		argv, err := p.CmdLine()
		if err != nil || len(argv) == 0 || argv[0] != binary || !containsInOrder(argv[1:], args) {
			continue // the process ended while listing, or runs something else
		}
		found = append(found, p.PID)
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
	p, err := process(pid)
	if err != nil {
		return "", err
	}
	argv, err := p.CmdLine()
	if err != nil {
		return "", fmt.Errorf("read the command line of process %d: %w", pid, err)
	}
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
