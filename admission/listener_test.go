package admission

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// server accepts through l and greets every admitted connection with one
// byte, so a client can tell admitted (reads 'k') from refused (EOF/reset).
type server struct {
	l     *Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func serve(t *testing.T, g *Gate) *server {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{l: g.Wrap(nl), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := s.l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock() // recorded before the greeting: a greeted client's conn is in s.conns
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			_, _ = c.Write([]byte{'k'})
		}
	}()
	t.Cleanup(func() {
		_ = s.l.Close()
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
	return s
}

// closeOne closes the oldest admitted connection on the server side.
func (s *server) closeOne(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) == 0 {
		t.Fatal("no admitted connection to close")
	}
	_ = s.conns[0].Close()
	s.conns = s.conns[1:]
}

// dial connects from src and reports whether the gate admitted it. The
// client connection is closed when the test ends.
func dial(t *testing.T, s *server, src string) bool {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", s.l.Addr().String())
	if errors.Is(err, syscall.ECONNRESET) {
		return false // the refusal's reset beat the end of the handshake
	}
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	n, err := c.Read(b[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection from %s neither greeted nor refused within 5 s", src)
	}
	return n == 1 && b[0] == 'k'
}

func refused(t *testing.T, m *metrics.Edge, reason string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Refused.WithLabelValues(reason).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.Counter.GetValue()
}

func TestPerIPCap(t *testing.T) {
	m := metrics.NewEdge(prometheus.NewRegistry())
	g := New(Options{MaxConnsPerIP: 3}, m)
	s := serve(t, g)
	var got []bool
	for range 5 {
		got = append(got, dial(t, s, "127.0.0.2"))
	}
	want := []bool{true, true, true, false, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("admitted from 127.0.0.2 = %v, want %v", got, want)
		}
	}
	if !dial(t, s, "127.0.0.3") {
		t.Fatal("another address was refused: the per-IP cap must not touch it")
	}
	if n := refused(t, m, metrics.RefusedPerIP); n != 2 {
		t.Fatalf("per_ip refusals = %v, want 2", n)
	}
	s.closeOne(t) // frees one of 127.0.0.2's slots
	if !dial(t, s, "127.0.0.2") {
		t.Fatal("a closed connection did not give its slot back")
	}
	if g.Open() != 4 {
		t.Fatalf("open = %d, want 4", g.Open())
	}
}

func TestGlobalCapSpansListeners(t *testing.T) {
	m := metrics.NewEdge(prometheus.NewRegistry())
	g := New(Options{MaxConns: 3}, m)
	a, b := serve(t, g), serve(t, g)
	got := []bool{dial(t, a, "127.0.0.2"), dial(t, b, "127.0.0.3"), dial(t, a, "127.0.0.4"), dial(t, b, "127.0.0.5")}
	if !got[0] || !got[1] || !got[2] || got[3] {
		t.Fatalf("admitted = %v, want the first 3 over both listeners", got)
	}
	if n := refused(t, m, metrics.RefusedGlobal); n != 1 {
		t.Fatalf("global refusals = %v, want 1", n)
	}
	a.closeOne(t)
	if !dial(t, b, "127.0.0.5") {
		t.Fatal("slot freed on one listener is not usable on another")
	}
}

func TestListenerLimit(t *testing.T) {
	m := metrics.NewEdge(prometheus.NewRegistry())
	g := New(Options{}, m)
	s := serve(t, g)
	s.l.SetLimit(2)
	got := []bool{dial(t, s, "127.0.0.2"), dial(t, s, "127.0.0.3"), dial(t, s, "127.0.0.4")}
	if !got[0] || !got[1] || got[2] {
		t.Fatalf("admitted = %v, want 2 of 3", got)
	}
	if n := refused(t, m, metrics.RefusedListener); n != 1 {
		t.Fatalf("listener refusals = %v, want 1", n)
	}
	s.l.SetLimit(0)
	if !dial(t, s, "127.0.0.4") {
		t.Fatal("limit 0 must mean no cap")
	}
	// A refused connection holds no slot anywhere.
	if g.Open() != 3 || s.l.Open() != 3 {
		t.Fatalf("open = %d / %d, want 3", g.Open(), s.l.Open())
	}
}

func TestConnCloseReleasesOnce(t *testing.T) {
	g := New(Options{MaxConns: 1}, nil)
	s := serve(t, g)
	if !dial(t, s, "127.0.0.2") {
		t.Fatal("first connection refused")
	}
	s.mu.Lock()
	c := s.conns[0]
	s.mu.Unlock()
	_ = c.Close()
	_ = c.Close() // a second Close must not free a second slot
	if g.Open() != 0 {
		t.Fatalf("open = %d after double close, want 0", g.Open())
	}
	if !dial(t, s, "127.0.0.2") || dial(t, s, "127.0.0.3") {
		t.Fatal("cap of 1 not held after a double close")
	}
}

func TestMaxConnsFor(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{
		{0, 64}, {256, 64}, {1024, 64}, {1152, 64}, {4096, 1536}, {20000, 9488},
		{65536, 32256}, {1 << 20, 523776}, {1 << 62, (1<<30 - Reserve) / 2},
	} {
		if got := MaxConnsFor(tc.nofile); got != tc.want {
			t.Errorf("MaxConnsFor(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
	}
}

func TestDefaultOptions(t *testing.T) {
	o := DefaultOptions()
	if o.MaxConns < 64 || o.MaxConnsPerIP <= 0 || o.MaxConnsPerIP > o.MaxConns || o.IdleTimeout <= 0 {
		t.Fatalf("DefaultOptions = %+v", o)
	}
}

// TestEvictIdleAtGlobalCap: at the global cap a new connection closes the
// longest-idle one; connections with a request in progress are never
// evicted, and with none idle the newcomer is refused.
func TestEvictIdleAtGlobalCap(t *testing.T) {
	m := metrics.NewEdge(prometheus.NewRegistry())
	g := New(Options{MaxConns: 2, EvictIdleAfter: time.Nanosecond}, m)
	s, first, _, a, b := twoConns(t, g)
	g.MarkIdle(a)
	g.MarkIdle(b)
	g.MarkBusy(b) // b starts a request
	if !dial(t, s, "127.0.0.4") {
		t.Fatal("at the cap with an idle connection, a newcomer was refused")
	}
	if !closedByPeer(t, first) {
		t.Fatal("the idle connection was not the one evicted")
	}
	var d dto.Metric
	_ = m.Evicted.Write(&d)
	if d.Counter.GetValue() != 1 {
		t.Fatalf("evictions = %v, want 1", d.Counter.GetValue())
	}
	// Now b (busy) and the newcomer (never marked idle) hold the cap.
	if dial(t, s, "127.0.0.5") {
		t.Fatal("a busy connection was evicted")
	}
	if n := refused(t, m, metrics.RefusedGlobal); n != 1 {
		t.Fatalf("global refusals = %v, want 1", n)
	}
}

// TestOverShareEvictsNobody: at the global cap with an idle connection
// to evict, a client already at its per-address share is refused per
// address and evicts nothing; the idle connection stays until a client
// within its share needs the room.
func TestOverShareEvictsNobody(t *testing.T) {
	m := metrics.NewEdge(prometheus.NewRegistry())
	g := New(Options{MaxConns: 2, MaxConnsPerIP: 1, EvictIdleAfter: time.Nanosecond}, m)
	s, idle, _, a, _ := twoConns(t, g)
	g.MarkIdle(a)
	if dial(t, s, "127.0.0.3") {
		t.Fatal("a second connection from an address at its share was admitted")
	}
	if n := refused(t, m, metrics.RefusedPerIP); n != 1 {
		t.Fatalf("per-address refusals = %v, want 1", n)
	}
	var d dto.Metric
	_ = m.Evicted.Write(&d)
	if got := d.Counter.GetValue(); got != 0 {
		t.Fatalf("evictions = %v after a per-address refusal, want 0", got)
	}
	if !dial(t, s, "127.0.0.4") {
		t.Fatal("a newcomer within its share was refused at the cap with an idle connection")
	}
	if !closedByPeer(t, idle) {
		t.Fatal("the idle connection was not the one evicted")
	}
}

// TestEvictSkipsBusyListed: a connection marked busy stays on the idle
// list (MarkBusy takes no lock), so eviction must pass over it even when
// it is the longest listed, take the idle one behind it, and evict the
// busy one only after it is marked idle again.
func TestEvictSkipsBusyListed(t *testing.T) {
	m := metrics.NewEdge(prometheus.NewRegistry())
	g := New(Options{MaxConns: 2, EvictIdleAfter: time.Nanosecond}, m)
	s, first, second, a, b := twoConns(t, g)
	g.MarkIdle(a) // a is listed first: the longest idle
	g.MarkIdle(b)
	g.MarkBusy(a) // a starts a request, still listed at the front
	if !dial(t, s, "127.0.0.4") {
		t.Fatal("at the cap with an idle connection behind a busy one, a newcomer was refused")
	}
	if !closedByPeer(t, second) {
		t.Fatal("the idle connection was not the one evicted")
	}
	// a (busy) and the newcomer (never marked idle) hold the cap.
	if dial(t, s, "127.0.0.5") {
		t.Fatal("a busy connection was evicted")
	}
	g.MarkIdle(a) // a's request ended: evictable again
	if !dial(t, s, "127.0.0.6") {
		t.Fatal("a connection idle again after its request was not evicted")
	}
	if !closedByPeer(t, first) {
		t.Fatal("the connection idle again was not the one evicted")
	}
}

// TestMarkIdleAtMoment: the idle bound counts from the moment MarkIdleAt
// is given (the HTTP layer's own reading), not from the call: a
// connection marked idle a second before the bound is spared, one
// marked before it is evicted.
func TestMarkIdleAtMoment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		idleFor time.Duration // before the call, as the moment given
		evicted bool
	}{
		{"idle past the bound", 2 * time.Minute, true},
		{"idle within the bound", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Options{MaxConns: 1, EvictIdleAfter: time.Minute}, metrics.NewEdge(prometheus.NewRegistry()))
			s := serve(t, g)
			held := dialConn(t, s, "127.0.0.2")
			s.mu.Lock()
			a := s.conns[0]
			s.mu.Unlock()
			g.MarkIdleAt(a, time.Now().Add(-tc.idleFor))
			if got := dial(t, s, "127.0.0.3"); got != tc.evicted {
				t.Fatalf("newcomer admitted %v, want %v", got, tc.evicted)
			}
			if tc.evicted && !closedByPeer(t, held) {
				t.Fatal("the idle connection was not closed")
			}
		})
	}
}

// twoConns serves g and admits a connection from 127.0.0.2, then one from
// 127.0.0.3: the clients' ends and the gate's, in that order.
func twoConns(t *testing.T, g *Gate) (s *server, first, second, a, b net.Conn) {
	t.Helper()
	s = serve(t, g)
	first = dialConn(t, s, "127.0.0.2")
	second = dialConn(t, s, "127.0.0.3")
	s.mu.Lock()
	defer s.mu.Unlock()
	return s, first, second, s.conns[0], s.conns[1]
}

// dialConn connects from src and waits for the greeting.
func dialConn(t *testing.T, s *server, src string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", s.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("not admitted: %v", err)
	}
	return c
}

// closedByPeer reports whether the gateway closed c (EOF or reset before
// the read deadline).
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	var b [1]byte
	_, err := c.Read(b[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// A request that starts on the chosen connection in the instant it is
// evicted holds the socket's read side while it is served (h1 serves
// inside the read wait, where a Close waits for it): the eviction must
// neither wait for that request nor delay the newcomer.
func TestEvictDoesNotWaitForHeldRead(t *testing.T) {
	g := New(Options{MaxConns: 2, EvictIdleAfter: time.Nanosecond}, nil)
	s, first, _, a, _ := twoConns(t, g)
	g.MarkIdle(a)

	rc, err := a.(*conn).Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	release, held, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_ = rc.Read(func(uintptr) bool {
			close(held)
			<-release // a request served inside the read wait
			return true
		})
	}()
	t.Cleanup(func() { close(release); <-done })
	<-held

	if !dial(t, s, "127.0.0.4") { // fails after 5 s if the accept path waits
		t.Fatal("at the cap with an idle connection, a newcomer was refused")
	}
	if !closedByPeer(t, first) {
		t.Fatal("the evicted connection's client did not see it end")
	}
}
