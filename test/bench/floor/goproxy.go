package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// goProxy is design (a): one goroutine per client connection, which reads
// a request, forwards it on its own kept-alive engine connection, reads
// the answer and forwards it; each wait parks the goroutine on Go's
// netpoller.
type goProxy struct {
	engine string
	raw    bool // rawConn, not netConn
	bufLen int
}

func (g *goProxy) serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("floor: accept: %w", err)
		}
		if g.raw {
			go g.rawConn(c)
		} else {
			go g.netConn(c)
		}
	}
}

// netConn serves one client connection on net.Conn as it comes: each
// read tries the socket first and parks on EAGAIN, so every wait costs an
// empty read.
func (g *goProxy) netConn(c net.Conn) {
	defer c.Close()
	var eng net.Conn
	defer func() {
		if eng != nil {
			_ = eng.Close()
		}
	}()
	req, resp := newPipe(g.bufLen, false), newPipe(g.bufLen, true)
	for {
		for { // the request, forwarded as it is walked
			done, err := req.walk()
			if err != nil {
				return
			}
			if out := req.out(); len(out) > 0 {
				if eng == nil {
					if eng, err = net.Dial("tcp", g.engine); err != nil {
						return
					}
				}
				if _, err := eng.Write(out); err != nil {
					return
				}
				req.wrote(len(out))
			}
			if done {
				break
			}
			if err := fill(req, c); err != nil {
				return
			}
		}
		resp.f.next(req.f.isHead)
		for { // the answer, forwarded as it is walked
			if err := fill(resp, eng); err != nil {
				return
			}
			done, err := resp.walk()
			if err != nil {
				return
			}
			if out := resp.out(); len(out) > 0 {
				if _, err := c.Write(out); err != nil {
					return
				}
				resp.wrote(len(out))
			}
			if done {
				break
			}
		}
		closeEngine, err := answered(req, resp)
		if closeEngine {
			_ = eng.Close()
			eng = nil
		}
		if err != nil {
			return
		}
	}
}

// fill reads once from c into q.
func fill(q *pipe, c net.Conn) error {
	sp, err := q.space()
	if err != nil {
		return err
	}
	n, err := c.Read(sp)
	if n > 0 {
		q.filled(n)
		return nil
	}
	if err == nil {
		err = io.EOF
	}
	return err
}

// rawConn serves one client connection with no read that finds a socket
// empty, the most a goroutine design can save per call (datapath/sockio
// does the same): the whole connection runs inside one wait on the
// client socket's readiness (RawConn.Read, whose callback reads, serves
// and returns false to wait again), and each engine exchange inside one
// wait on the engine socket's, whose first call writes the request and
// waits for the answer before reading. A wait started before the write
// misses no readiness edge that comes after it. Reads and writes are
// rawsock's calls (no syscall bookkeeping).
func (g *goProxy) rawConn(c net.Conn) {
	defer c.Close()
	x := &rawExchange{g: g, req: newPipe(g.bufLen, false), resp: newPipe(g.bufLen, true)}
	defer x.closeEngine()
	var err error
	if x.cl, err = rawOf(c); err != nil {
		return
	}
	x.clientFn, x.engineFn = x.onClient, x.onEngine
	_ = x.cl.rc.Read(x.clientFn) // returns when the connection ends
}

// rawSock is a net.Conn and its RawConn.
type rawSock struct {
	c   net.Conn
	rc  syscall.RawConn
	p   []byte // write's bytes left
	err error
	fn  func(uintptr) bool
}

func rawOf(c net.Conn) (*rawSock, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("floor: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("floor: raw conn: %w", err)
	}
	s := &rawSock{c: c, rc: rc}
	s.fn = s.writeRaw
	return s, nil
}

// write writes all of p, parking while the socket has no room.
func (s *rawSock) write(p []byte) error {
	s.p, s.err = p, nil
	err := s.rc.Write(s.fn)
	s.p = nil
	if err != nil {
		return err
	}
	return s.err
}

// writeRaw is write's RawConn callback: false waits for room.
func (s *rawSock) writeRaw(fd uintptr) bool {
	n, blocked, err := writeSome(fd, s.p)
	s.p, s.err = s.p[n:], err
	return !blocked
}

// rawExchange is rawConn's state, which its two callbacks share.
type rawExchange struct {
	g                  *goProxy
	cl, eng            *rawSock
	req, resp          *pipe
	clientFn, engineFn func(uintptr) bool
	last               []byte // the request's last bytes, written from the engine's wait
	sent               bool   // last is written: the engine callback reads
	err                error
}

// onClient runs when the client socket may be readable: it reads, serves
// every whole request the buffer holds, and waits when the socket is
// drained (true ends the connection).
func (x *rawExchange) onClient(fd uintptr) bool {
	for {
		st, err := readPipe(fd, x.req)
		if err != nil {
			return true
		}
		if st == readEmpty {
			return false
		}
		for {
			served, err := x.forward()
			if err != nil {
				return true
			}
			if !served || !x.req.pending() {
				break
			}
		}
		if st == readDrained {
			return false // the next bytes' edge wakes this wait
		}
	}
}

// forward walks the request bytes read and writes them to the engine;
// when the request ends it relays the answer (served).
func (x *rawExchange) forward() (bool, error) {
	done, err := x.req.walk()
	if err != nil {
		return false, err
	}
	out := x.req.out()
	if len(out) > 0 && x.eng == nil {
		c, err := net.Dial("tcp", x.g.engine)
		if err != nil {
			return false, fmt.Errorf("floor: dial engine: %w", err)
		}
		if x.eng, err = rawOf(c); err != nil {
			_ = c.Close()
			return false, err
		}
	}
	if !done {
		if len(out) > 0 {
			if err := x.eng.write(out); err != nil {
				return false, err
			}
			x.req.wrote(len(out))
		}
		return false, nil
	}
	x.resp.f.next(x.req.f.isHead)
	x.last, x.sent, x.err = out, false, nil
	if err := x.eng.rc.Read(x.engineFn); err != nil {
		return false, err
	}
	if !x.sent && x.err == nil { // the socket took part of the request: the rest, then the answer
		if err := x.eng.write(x.last); err != nil {
			return false, err
		}
		x.sent = true
		if err := x.eng.rc.Read(x.engineFn); err != nil {
			return false, err
		}
	}
	if x.err != nil {
		return false, x.err
	}
	x.req.wrote(len(out))
	closeEngine, err := answered(x.req, x.resp)
	if closeEngine {
		x.closeEngine()
	}
	return err == nil, err
}

// onEngine is an exchange's engine callback: its first call writes the
// request's last bytes and waits; later calls read the answer and write
// it to the client, until the answer ends (true).
func (x *rawExchange) onEngine(fd uintptr) bool {
	if !x.sent {
		n, blocked, err := writeSome(fd, x.last)
		x.last, x.err = x.last[n:], err
		if blocked || err != nil {
			return true // forward writes the rest, parked
		}
		x.sent = true
		return false
	}
	for {
		st, err := readPipe(fd, x.resp)
		if err != nil {
			x.err = err
			return true
		}
		if st == readEmpty {
			return false
		}
		done, err := x.resp.walk()
		if err != nil {
			x.err = err
			return true
		}
		if out := x.resp.out(); len(out) > 0 {
			if err := x.cl.write(out); err != nil {
				x.err = err
				return true
			}
			x.resp.wrote(len(out))
		}
		if done {
			return true
		}
		if st == readDrained {
			return false
		}
	}
}

func (x *rawExchange) closeEngine() {
	if x.eng != nil {
		_ = x.eng.c.Close()
		x.eng = nil
	}
}
