package tcpproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/tcpproxy"
)

// quiet is how long a read waits to conclude that nothing is delivered. A
// longer wait could only hide a delivery that happens late, never make a
// passing test fail.
const quiet = 300 * time.Millisecond

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return lis.Addr().String()
}

func startProxy(t *testing.T, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// client is one connection through the proxy.
type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &client{t: t, conn: conn, r: bufio.NewReader(conn)}
}

func (c *client) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, line+"\n"); err != nil {
		c.t.Fatalf("write %q: %v", line, err)
	}
}

// read returns the next line, or the error that ended the wait.
func (c *client) read(wait time.Duration) (string, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(wait))
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// echoes checks that line comes back.
func (c *client) echoes(line string) {
	c.t.Helper()
	c.send(line)
	if got, err := c.read(10 * time.Second); err != nil || got != line {
		c.t.Fatalf("echo of %q = %q, %v", line, got, err)
	}
}

// silent checks that nothing arrives for a while.
func (c *client) silent(what string) {
	c.t.Helper()
	if got, err := c.read(quiet); !errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("%s: read %q, %v; want nothing delivered", what, got, err)
	}
}

// closed checks that the connection was ended by the proxy.
func (c *client) closed(what string) {
	c.t.Helper()
	if got, err := c.read(10 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("%s: read %q, %v; want the connection closed", what, got, err)
	}
}

func TestPass(t *testing.T) {
	p := startProxy(t, echoServer(t))
	if p.Mode() != tcpproxy.Pass {
		t.Errorf("a new proxy is in mode %v, want pass", p.Mode())
	}
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	a.echoes("one")
	b.echoes("two")
	a.echoes(strings.Repeat("x", 100<<10))
}

func TestCutAndRestore(t *testing.T) {
	tests := map[string]struct {
		mode tcpproxy.Mode
		// delivered: what was sent during the cut arrives after Restore
		// and the connection goes on; otherwise it is lost and the
		// connection is closed.
		delivered bool
	}{
		"drop: a black hole, connections that lost bytes are closed on restore": {mode: tcpproxy.Drop},
		"stall: held bytes arrive on restore and connections go on":             {mode: tcpproxy.Stall, delivered: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := startProxy(t, echoServer(t))
			before := dial(t, p.Addr())
			before.echoes("before the cut")
			idle := dial(t, p.Addr())
			idle.echoes("idle during the cut")

			p.Cut(tc.mode)
			if p.Mode() != tc.mode {
				t.Errorf("mode after Cut = %v, want %v", p.Mode(), tc.mode)
			}
			before.send("during the cut")
			before.silent("an open connection during the cut")
			during := dial(t, p.Addr()) // accepted, as in a partition
			during.send("new connection during the cut")
			during.silent("a connection made during the cut")

			p.Restore()
			if p.Mode() != tcpproxy.Pass {
				t.Errorf("mode after Restore = %v, want pass", p.Mode())
			}
			if tc.delivered {
				for c, want := range map[*client]string{before: "during the cut", during: "new connection during the cut"} {
					if got, err := c.read(10 * time.Second); err != nil || got != want {
						t.Errorf("after restore: read %q, %v; want the held %q", got, err, want)
					}
				}
				before.echoes("after the restore")
				during.echoes("after the restore")
			} else {
				before.closed("a connection that lost bytes")
				during.closed("a connection made during the drop")
			}
			idle.echoes("an idle connection lost nothing")
			dial(t, p.Addr()).echoes("a new connection after the restore")
		})
	}
}

func TestTargetEndPassesThrough(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	p := startProxy(t, lis.Addr().String())
	c := dial(t, p.Addr())
	server, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(server, "bye\n"); err != nil {
		t.Fatal(err)
	}
	_ = server.Close()
	if got, err := c.read(10 * time.Second); err != nil || got != "bye" {
		t.Fatalf("read %q, %v", got, err)
	}
	c.closed("after the target closed its side")
}

func TestTargetDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	p := startProxy(t, addr)
	dial(t, p.Addr()).closed("a connection to a target that does not listen")
}

func TestClose(t *testing.T) {
	p, err := tcpproxy.Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	open := dial(t, p.Addr())
	open.echoes("hello")
	stalled := dial(t, p.Addr())
	p.Cut(tcpproxy.Stall)
	stalled.send("held")
	p.Close()
	p.Close()
	open.closed("an open connection after Close")
	stalled.closed("a stalled connection after Close")
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Error("a closed proxy still accepts connections")
	}
}

func TestCutPassPanics(t *testing.T) {
	p := startProxy(t, echoServer(t))
	defer func() {
		if recover() == nil {
			t.Error("Cut(Pass) did not panic")
		}
	}()
	p.Cut(tcpproxy.Pass)
}

func TestModeString(t *testing.T) {
	for mode, want := range map[tcpproxy.Mode]string{tcpproxy.Pass: "pass", tcpproxy.Drop: "drop", tcpproxy.Stall: "stall", 7: "Mode(7)"} {
		if got := mode.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(mode), got, want)
		}
	}
}
