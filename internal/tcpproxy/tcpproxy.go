package tcpproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does with the bytes and connections it sees.
type Mode int

const (
	// Pass forwards every connection to the target, both ways.
	Pass Mode = iota
	// Drop is a black hole: bytes are read and thrown away in both
	// directions, and new connections are accepted but lead nowhere. The
	// connections that lost bytes are closed when the proxy is restored,
	// as a peer that missed part of a stream can only reset it; clients
	// must notice the partition by their own deadlines and keepalives.
	Drop
	// Stall holds the bytes: nothing is delivered, new connections are
	// accepted and wait, and once the proxy is restored everything held is
	// delivered in order and the connections go on, as over a network that
	// stopped moving packets for a while without losing them. Senders are
	// slowed down by TCP flow control meanwhile, not refused.
	Stall
)

var modeNames = map[Mode]string{Pass: "pass", Drop: "drop", Stall: "stall"}

func (m Mode) String() string {
	if name, ok := modeNames[m]; ok {
		return name
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// dialTimeout bounds connecting to the target; a target that is down
// (restarting, say) is a closed connection for the client, as it would be
// without the proxy.
const dialTimeout = 5 * time.Second

// Proxy forwards TCP connections to a target, and can be cut (Drop or Stall)
// and restored at any time. It is safe for concurrent use.
type Proxy struct {
	target string
	lis    net.Listener

	mu   sync.Mutex
	mode Mode
	// changed is closed and replaced on every change of mode, and closed
	// for good by Close: stalled connections wait on it.
	changed chan struct{}
	links   map[*link]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// link is one proxied connection: the client's side and, once dialled, the
// target's.
type link struct {
	client net.Conn
	server net.Conn
	// dropped is set once the link lost bytes (or a connection) to Drop.
	dropped atomic.Bool
}

// Start listens on a free loopback port and forwards what it accepts to
// target (host:port). Close stops it.
func Start(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	p := &Proxy{target: target, lis: lis, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the host:port that clients dial instead of the target.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Cut partitions the clients from the target: mode is Drop or Stall (Pass
// is Restore). Bytes read after Cut returns are not delivered; a write to
// the other side that was under way when it was called may still complete.
func (p *Proxy) Cut(mode Mode) {
	if mode != Drop && mode != Stall {
		panic(fmt.Sprintf("tcpproxy: Cut(%v): want Drop or Stall", mode))
	}
	p.setMode(mode)
}

// Restore heals the partition: held bytes are delivered, connections that
// lost bytes to Drop are closed, and everything passes again.
func (p *Proxy) Restore() {
	p.setMode(Pass)
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		if l.dropped.Load() {
			l.close()
		}
	}
}

func (p *Proxy) setMode(mode Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == mode {
		return
	}
	p.mode = mode
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns the mode, the channel closed at its next change, and
// whether the proxy is closed.
func (p *Proxy) state() (Mode, <-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.changed, p.closed
}

// Close stops accepting, closes every connection and waits until all of
// the proxy's goroutines have ended. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.changed)
		_ = p.lis.Close()
		for l := range p.links {
			l.close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.lis.Accept()
		if err != nil {
			return
		}
		l := &link{client: client}
		if !p.track(l) {
			return
		}
		p.wg.Go(func() { p.serve(l) })
	}
}

// track remembers l so that Restore and Close can end it; it reports false
// (and closes l) once the proxy is closed.
func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		l.close()
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
	l.close()
}

// serve connects a new client to the target once the proxy passes, then
// pipes both ways until either side ends.
func (p *Proxy) serve(l *link) {
	defer p.forget(l)
	if !p.admit(l) {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		return
	}
	p.mu.Lock()
	l.server = server
	closed := p.closed
	p.mu.Unlock()
	if closed {
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(l, server, l.client) })
	wg.Go(func() { p.pipe(l, l.client, server) })
	wg.Wait()
}

// admit waits until a new connection may be dialled through: at once when
// passing, after Restore when stalled. A connection accepted while dropping
// goes nowhere: it is read and forgotten until Restore or Close ends it, and
// admit reports false.
func (p *Proxy) admit(l *link) bool {
	for {
		mode, changed, closed := p.state()
		switch {
		case closed:
			return false
		case mode == Drop:
			l.dropped.Store(true)
			_, _ = io.Copy(io.Discard, l.client)
			return false
		case mode == Stall:
			<-changed
		default:
			return true
		}
	}
}

// pipe copies src to dst as the mode allows until src ends; then it ends
// dst too, unless the end of stream was lost to Drop.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.deliver(l, dst, buf[:n]) {
			l.close()
			return
		}
		if err != nil {
			// The end of stream travels like the bytes before it.
			if p.deliver(l, dst, nil) && !l.dropped.Load() {
				l.close()
			}
			return
		}
	}
}

// deliver writes b to dst once the mode lets it through: at once when
// passing, after Restore when stalled, never once dropped. It reports false
// when the link is over (the proxy closed or dst failed).
func (p *Proxy) deliver(l *link, dst net.Conn, b []byte) bool {
	for {
		mode, changed, closed := p.state()
		switch {
		case closed:
			return false
		case l.dropped.Load():
			return true
		case mode == Drop:
			l.dropped.Store(true)
			return true
		case mode == Stall:
			<-changed
		default:
			if len(b) == 0 {
				return true
			}
			_, err := dst.Write(b)
			return err == nil
		}
	}
}

// close ends both sides of the link.
func (l *link) close() {
	_ = l.client.Close()
	if l.server != nil {
		_ = l.server.Close()
	}
}
