// Package proc runs the commands that the demo, the benchmarks and the
// end-to-end tests start as child processes: each with its output in a log
// file, killed if its parent dies, stopped with a drain before a kill.
package proc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a running child process with its output in a log file.
type Process struct {
	// Name labels the process; its log is Name.log.
	Name string
	// LogPath is the file that holds its stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs bin with args; its output is appended to logDir/name.log, so
// that a process restarted under the same name keeps one history. The
// process is killed if the calling process dies, so nothing outlives it.
func Start(bin, logDir, name string, args ...string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Tail is the last n lines of the process's log, or why it cannot be
// read: what a failed test prints, so that its output says why a process
// did not do what the test waited for.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(log of %s unreadable: %v)", p.Name, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop asks the process to drain (SIGTERM) and kills it if it has not
// exited after grace. An exit status is not an error: a drained server may
// exit non-zero.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		var exitErr *exec.ExitError
		if p.err != nil && !errors.As(p.err, &exitErr) {
			return fmt.Errorf("%s: %w", p.Name, p.err)
		}
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s after SIGTERM and was killed; see %s", p.Name, grace, p.LogPath)
	}
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// WaitHealthy polls url with client until it answers 200, the process
// exits, or ctx ends.
func (p *Process) WaitHealthy(ctx context.Context, client *http.Client, url string) error {
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("health check of %s: %w", p.Name, err)
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (see %s): %w", p.Name, p.LogPath, cmp.Or(p.err, errors.New("exit status 0")))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w; see %s", p.Name, url, ctx.Err(), p.LogPath)
		case <-ticker.C:
		}
	}
}

// handedOut are the addresses FreeAddress returned in this process: the
// kernel may give a port it just freed to the next listener on port 0, so
// two calls in a row (a process's metrics and health addresses) could
// otherwise return the same address.
var handedOut sync.Map

// FreeAddress returns a loopback address with a port nobody listens on and
// that it did not return before in this process.
func FreeAddress() (string, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("find a free port: %w", err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr, nil
		}
	}
	return "", errors.New("find a free port: 100 ports in a row were ones handed out before")
}
