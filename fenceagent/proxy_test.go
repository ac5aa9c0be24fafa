package fenceagent

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// tcpProxy forwards TCP connections to a target until it is cut. A cut
// proxy behaves like a network partition: it keeps every connection open
// but drops what flows through it, and accepts new connections that go
// nowhere, so calls hang until their deadline instead of failing fast.
type tcpProxy struct {
	// Addr is the proxy's listening address.
	Addr string

	target string
	lis    net.Listener
	cut    atomic.Bool

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// startProxy forwards to target until the test ends.
func startProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &tcpProxy{Addr: lis.Addr().String(), target: target, lis: lis}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Cut partitions the proxy's clients from the target.
func (p *tcpProxy) Cut() { p.cut.Store(true) }

func (p *tcpProxy) accept() {
	for {
		client, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		if p.cut.Load() {
			p.wg.Go(func() { _, _ = io.Copy(io.Discard, client) })
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(server) {
			return
		}
		p.wg.Go(func() { p.pipe(server, client) })
		p.wg.Go(func() { p.pipe(client, server) })
	}
}

// pipe copies from src to dst until either ends; once cut, it reads and
// drops.
func (p *tcpProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// A partition delivers no end of stream either.
			if !p.cut.Load() {
				_ = dst.Close()
			}
			return
		}
	}
}

// track remembers a connection so that close can end it; it reports false
// (and closes c) when the proxy is already closed.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *tcpProxy) close() {
	_ = p.lis.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns, p.closed = nil, true
	p.mu.Unlock()
	p.wg.Wait()
}
