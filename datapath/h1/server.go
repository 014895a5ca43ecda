package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
)

// Server serves HTTP/1.1 on plaintext connections. Its zero value is not
// usable: set Handler. Options mirror net/http.Server's of the same name.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request head once its first byte
	// arrived (and the first request of a connection from its accept).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request with its body, from its first
	// byte; the handler may move or lift it (http.ResponseController).
	ReadTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection (0: ReadTimeout, as net/http).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request head (0: DefaultMaxHeaderByte).
	MaxHeaderBytes int
	// ConnState, when set, is told of each connection's transitions (New,
	// Active, Idle, Closed) as net/http.Server's is.
	ConnState func(net.Conn, http.ConnState)
	// ConnIdle, when set, is told in ConnState's place when a connection
	// goes idle after a request, with the moment it did: the clock reading
	// its idle deadline starts from, so the hook (the admission layer's
	// idle mark) needs none of its own.
	ConnIdle func(net.Conn, time.Time)
	// RemoteIP, when set, parses a connection's RemoteAddr once, as its
	// first request is awaited; handlers read the result per request
	// (ResponseWriter.RemoteIP) instead of parsing the same string again
	// at each request of a keep-alive connection (the datapath's
	// per-address request cap: ~390 instructions a request).
	RemoteIP func(remoteAddr string) netip.Addr
	// ErrorLog receives handler panics; nil is the log package's default.
	ErrorLog *log.Logger
	// Watcher cancels the requests of clients that go away; several
	// servers may share one. nil: the server starts its own at Serve and
	// stops it at Shutdown or Close.
	Watcher *Watcher

	mu         sync.Mutex
	listeners  map[*net.Listener]struct{}
	conns      map[uint64]*conn
	nextID     uint64
	inShutdown atomic.Bool
	watchOnce  sync.Once
	watch      *Watcher // Watcher, or the server's own (ownWatch); nil where the platform has none
	// hup tells connections served inside their read wait of a client's FIN
	// that came with its last request (sockio.Conn.WatchHangUp).
	hup      sockio.HupWatcher
	ownWatch bool
	readers  sync.Pool // *bufio.Reader
	writers  sync.Pool // *bufio.Writer
	pending  sync.Pool // *[]byte, smallBody held-back response bodies
	states   sync.Pool // *reqState, finished requests' (recycle.go)
	// poison makes finished requests' states unusable instead of reusing
	// them, as -race builds always do (recycle.go); for tests.
	poison  bool
	dateNow atomic.Pointer[dateEntry]
}

// Connection buffer sizes: a request head longer than the reader's buffer
// is still read (line by line, up to MaxLine and MaxHeaderBytes).
const (
	readBufSize  = 4 << 10
	writeBufSize = 4 << 10
)

// Serve accepts connections on l and serves each on its own goroutine until
// l fails or the server is shut down (then http.ErrServerClosed).
func (s *Server) Serve(l net.Listener) error {
	if !s.track(&l, true) {
		return http.ErrServerClosed
	}
	defer s.track(&l, false)
	s.watchOnce.Do(func() {
		w, own := s.Watcher, false
		if w == nil {
			w, own = NewWatcher(), true
		}
		s.mu.Lock()
		s.watch, s.ownWatch = w, own
		s.mu.Unlock()
	})
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.shuttingDown() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors and the like: wait and retry, as net/http.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := s.newConn(nc)
		if c == nil {
			_ = nc.Close()
			continue
		}
		go c.serve()
	}
}

func (s *Server) track(l *net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.listeners, l)
		return true
	}
	if s.shuttingDown() {
		return false
	}
	if s.listeners == nil {
		s.listeners = map[*net.Listener]struct{}{}
	}
	s.listeners[l] = struct{}{}
	return true
}

func (s *Server) shuttingDown() bool { return s.inShutdown.Load() }

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes > 0 {
		return s.MaxHeaderBytes
	}
	return DefaultMaxHeaderByte
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.listeners {
		_ = (*l).Close()
	}
}

// Shutdown stops accepting, closes idle connections and waits for the
// active ones to finish their request (each closes after its response),
// until ctx ends (then ctx's error).
func (s *Server) Shutdown(ctx context.Context) error {
	s.inShutdown.Store(true)
	s.closeListeners()
	wait := time.Millisecond
	for {
		if s.closeIdle() {
			s.stopWatch()
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// Close stops accepting and closes every connection at once: the client
// sees the close and a request's context ends before Close returns; the
// descriptor itself is released once the request in progress returns.
func (s *Server) Close() error {
	s.inShutdown.Store(true)
	s.closeListeners()
	s.mu.Lock()
	for _, c := range s.conns {
		c.cut()
	}
	s.mu.Unlock()
	s.stopWatch()
	return nil
}

func (s *Server) stopWatch() {
	s.mu.Lock()
	w, own := s.watch, s.ownWatch
	s.mu.Unlock()
	if own {
		w.Close()
	}
}

// closeIdle closes the connections waiting for a request and reports
// whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosing) {
			_ = c.nc.Close()
		}
	}
	return len(s.conns) == 0
}

func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown() {
		return nil
	}
	s.nextID++
	c := &conn{srv: s, nc: nc, id: s.nextID, remote: nc.RemoteAddr().String()}
	c.sock.Reset(nc)
	// As net/http: handlers may ask which local address (the VIP) served them.
	c.ctx = newConnCtx(context.WithValue(context.Background(), http.LocalAddrContextKey, newLocalAddr(nc.LocalAddr())))
	c.proto = (&http.Request{}).WithContext(c.ctx)
	if s.conns == nil {
		s.conns = map[uint64]*conn{}
	}
	s.conns[c.id] = c
	s.watch.add(c)
	return c
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c.id)
	w := s.watch
	s.mu.Unlock()
	w.remove(c)
}

func (s *Server) setState(nc net.Conn, st http.ConnState) {
	if s.ConnState != nil {
		s.ConnState(nc, st)
	}
}

// setIdle reports that nc went idle after a request at now.
func (s *Server) setIdle(nc net.Conn, now time.Time) {
	if s.ConnIdle != nil {
		s.ConnIdle(nc, now)
		return
	}
	s.setState(nc, http.StateIdle)
}

func (s *Server) getReader(src io.Reader) *bufio.Reader {
	if br, ok := s.readers.Get().(*bufio.Reader); ok {
		br.Reset(src)
		return br
	}
	return bufio.NewReaderSize(src, readBufSize)
}

func (s *Server) getWriter(nc io.Writer) *bufio.Writer {
	if bw, ok := s.writers.Get().(*bufio.Writer); ok {
		bw.Reset(nc)
		return bw
	}
	return bufio.NewWriterSize(nc, writeBufSize)
}

// putWriter returns a write buffer to the pool, emptied of its writes
// and of the connection it wrote to.
func (s *Server) putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	s.writers.Put(bw)
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// dateEntry is the Date field value of one second.
type dateEntry struct {
	sec int64
	s   string
}

// date is the current Date field value, formatted once a second.
func (s *Server) date() string {
	now := time.Now()
	sec := now.Unix()
	if d := s.dateNow.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &dateEntry{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	s.dateNow.Store(d)
	return d.s
}
