package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/infergate/infergate/test/extprocclient"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// The lean driver (-driver lean) speaks to the EPP the way an event-driven
// proxy such as Envoy does: one connection per stream in flight, owned by
// one goroutine that writes HTTP/2 frames (golang.org/x/net/http2's
// Framer, hpack) and the gRPC message framing by hand, and reads the
// answers off the same socket — no gRPC client, no reader or writer
// goroutine to hand each message to and wake. It sends the same messages
// in the same order and waits on the same answers as the grpc-go driver
// (extprocclient), so the two differ only in what the client side costs:
// the EPP's share of a pick's latency is what is left when the driver
// costs least. It is a measuring instrument, not a conformance client: it
// checks what the figures rely on (the pick, header and metadata agree,
// the body comes back, the stream ends with grpc-status 0) and no more.

// extProcPath is the ext_proc RPC's HTTP/2 path.
const extProcPath = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"

// grpcHeaderLen is gRPC's message prefix: a compression flag and a
// big-endian length.
const grpcHeaderLen = 5

// leanConn is one HTTP/2 connection of the lean driver and the one stream
// at a time it carries.
type leanConn struct {
	conn      net.Conn
	bw        *bufio.Writer
	fr        *http2.Framer
	henc      *hpack.Encoder
	hbuf      bytes.Buffer
	authority string
	window    int64 // what the driver announces it will receive, per stream and connection

	nextID     uint32
	maxFrame   int   // the EPP's SETTINGS_MAX_FRAME_SIZE
	peerWindow int64 // the EPP's SETTINGS_INITIAL_WINDOW_SIZE
	sendConn   int64 // what the EPP's connection window lets us send
	recvUsed   int64 // received DATA not yet given back to the EPP's connection window

	// The current stream.
	id         uint32
	sendStream int64
	partial    []byte   // a gRPC message still arriving
	msgs       [][]byte // whole messages received and not yet read
	ended      bool     // trailers (or a reset) arrived
	endErr     error    // a non-OK end
	scratch    []byte   // the outgoing message buffer
}

// dialLean connects and exchanges the HTTP/2 preface and settings.
func dialLean(addr string, window int) (*leanConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("lean driver: dial %s: %w", addr, err)
	}
	if window <= 0 {
		window = 65535 // HTTP/2's initial window, never raised
	}
	l := &leanConn{
		conn: c, bw: bufio.NewWriterSize(c, 64<<10), authority: addr, window: int64(min(window, 1<<31-1)),
		nextID: 1, maxFrame: 16384, peerWindow: 65535, sendConn: 65535,
	}
	l.fr = http2.NewFramer(l.bw, bufio.NewReaderSize(c, 64<<10))
	l.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	l.henc = hpack.NewEncoder(&l.hbuf)
	if _, err := l.bw.WriteString(http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	settings := []http2.Setting{{ID: http2.SettingEnablePush, Val: 0}, {ID: http2.SettingInitialWindowSize, Val: uint32(l.window)}}
	err = l.fr.WriteSettings(settings...)
	if err == nil && l.window > 65535 {
		err = l.fr.WriteWindowUpdate(0, uint32(l.window-65535))
	}
	if err == nil {
		err = l.bw.Flush()
	}
	for settled := false; err == nil && !settled; {
		settled, err = l.readSettings() // the EPP's settings come first
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("lean driver: handshake with %s: %w", addr, err)
	}
	return l, nil
}

// readSettings reads one frame and reports whether it was the EPP's
// settings.
func (l *leanConn) readSettings() (bool, error) {
	f, err := l.fr.ReadFrame()
	if err != nil {
		return false, err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if err := l.handle(f); err != nil {
		return false, err
	}
	return ok && !sf.IsAck(), nil
}

func (l *leanConn) close() error { return l.conn.Close() }

// exchange runs one whole stream as extprocclient's exchange does and
// returns the pick latency (stream opened → pick received), the status of
// an immediate response (0 for a pick) and any error.
func (l *leanConn) exchange(r extprocclient.Request) (time.Duration, int, error) {
	start := time.Now()
	l.open()
	if err := l.writeHeaders(); err != nil {
		return 0, 0, err
	}
	if err := l.send(extprocclient.RequestHeadersMessage(r.Headers, len(r.Body) == 0), false); err != nil {
		return 0, 0, err
	}
	chunks := extprocclient.Chunks(r.Body, r.Chunk)
	for i, c := range chunks {
		if err := l.send(extprocclient.RequestBodyMessage(c, i == len(chunks)-1), false); err != nil {
			return 0, 0, err
		}
	}
	if err := l.bw.Flush(); err != nil {
		return 0, 0, err
	}
	first, err := l.recv()
	lat := time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("receive pick: %w", err)
	}
	p, err := extprocclient.FirstAnswer(first)
	if err != nil {
		return 0, 0, err
	}
	if first.GetImmediateResponse() != nil {
		return lat, p.Status, l.finish()
	}
	if err := checkPick(p); err != nil {
		return 0, 0, err
	}
	for pending := len(chunks) > 0; pending; {
		a, err := l.recv()
		if err != nil {
			return 0, 0, fmt.Errorf("receive body chunk: %w", err)
		}
		sr := a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return 0, 0, fmt.Errorf("body chunk answered with %T", a.GetResponse())
		}
		pending = !sr.GetEndOfStream()
	}
	for _, m := range []*extprocv3.ProcessingRequest{
		extprocclient.ResponseHeadersMessage(http.StatusOK, p.Endpoints[0], false),
		extprocclient.ResponseBodyMessage([]byte("data: [DONE]\n\n"), true),
	} {
		if err := l.send(m, true); err != nil {
			return 0, 0, err
		}
		if _, err := l.recv(); err != nil {
			return 0, 0, fmt.Errorf("response path: %w", err)
		}
	}
	return lat, 0, l.finish()
}

// open starts a new stream on the connection.
func (l *leanConn) open() {
	l.id = l.nextID
	l.nextID += 2
	l.sendStream = l.peerWindow
	l.partial, l.msgs, l.ended, l.endErr = l.partial[:0], l.msgs[:0], false, nil
}

func (l *leanConn) writeHeaders() error {
	l.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: extProcPath}, {Name: ":authority", Value: l.authority},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		if err := l.henc.WriteField(f); err != nil {
			return err
		}
	}
	return l.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: l.id, BlockFragment: l.hbuf.Bytes(), EndHeaders: true})
}

// send writes one gRPC message as DATA frames (buffered; flush says
// whether to write them out now), within the EPP's flow-control windows.
func (l *leanConn) send(m *extprocv3.ProcessingRequest, flush bool) error {
	b, err := proto.MarshalOptions{}.MarshalAppend(append(l.scratch[:0], 0, 0, 0, 0, 0), m)
	if err != nil {
		return err
	}
	l.scratch = b
	binary.BigEndian.PutUint32(b[1:grpcHeaderLen], uint32(len(b)-grpcHeaderLen))
	for len(b) > 0 {
		n := min(len(b), l.maxFrame)
		for int64(n) > min(l.sendConn, l.sendStream) {
			// Wait for the EPP's window updates; it reads on meanwhile.
			if err := l.bw.Flush(); err != nil {
				return err
			}
			if err := l.readFrame(); err != nil {
				return err
			}
			if l.ended {
				return fmt.Errorf("stream ended while sending: %w", l.endOrEOF())
			}
		}
		if err := l.fr.WriteData(l.id, false, b[:n]); err != nil {
			return err
		}
		l.sendConn -= int64(n)
		l.sendStream -= int64(n)
		b = b[n:]
	}
	if flush {
		return l.bw.Flush()
	}
	return nil
}

// recv returns the stream's next message.
func (l *leanConn) recv() (*extprocv3.ProcessingResponse, error) {
	for len(l.msgs) == 0 {
		if l.ended {
			return nil, l.endOrEOF()
		}
		if err := l.readFrame(); err != nil {
			return nil, err
		}
	}
	m := new(extprocv3.ProcessingResponse)
	err := proto.Unmarshal(l.msgs[0], m)
	l.msgs = l.msgs[1:]
	return m, err
}

func (l *leanConn) endOrEOF() error {
	if l.endErr != nil {
		return l.endErr
	}
	return errors.New("stream ended")
}

// finish half-closes the stream and reads to its trailers.
func (l *leanConn) finish() error {
	if err := l.fr.WriteData(l.id, true, nil); err != nil {
		return err
	}
	if err := l.bw.Flush(); err != nil {
		return err
	}
	for !l.ended {
		if err := l.readFrame(); err != nil {
			return err
		}
	}
	return l.endErr
}

func (l *leanConn) readFrame() error {
	f, err := l.fr.ReadFrame()
	if err != nil {
		return err
	}
	return l.handle(f)
}

// handle applies one frame from the EPP.
func (l *leanConn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		err := f.ForeachSetting(func(s http2.Setting) error {
			switch s.ID {
			case http2.SettingInitialWindowSize:
				l.sendStream += int64(s.Val) - l.peerWindow
				l.peerWindow = int64(s.Val)
			case http2.SettingMaxFrameSize:
				l.maxFrame = int(s.Val)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := l.fr.WriteSettingsAck(); err != nil {
			return err
		}
		return l.bw.Flush()
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		if err := l.fr.WritePing(true, f.Data); err != nil {
			return err
		}
		return l.bw.Flush()
	case *http2.WindowUpdateFrame:
		switch f.StreamID {
		case 0:
			l.sendConn += int64(f.Increment)
		case l.id:
			l.sendStream += int64(f.Increment)
		}
	case *http2.DataFrame:
		if err := l.giveBack(int64(f.Length)); err != nil {
			return err
		}
		if f.StreamID == l.id {
			l.partial = append(l.partial, f.Data()...)
			for len(l.partial) >= grpcHeaderLen {
				n := int(binary.BigEndian.Uint32(l.partial[1:grpcHeaderLen]))
				if len(l.partial) < grpcHeaderLen+n {
					break
				}
				l.msgs = append(l.msgs, bytes.Clone(l.partial[grpcHeaderLen:grpcHeaderLen+n]))
				l.partial = l.partial[:copy(l.partial, l.partial[grpcHeaderLen+n:])]
			}
		}
	case *http2.MetaHeadersFrame:
		if f.StreamID != l.id {
			return nil
		}
		if st := f.PseudoValue("status"); st != "" && st != "200" {
			l.ended, l.endErr = true, fmt.Errorf("HTTP status %s", st)
			return nil
		}
		if f.StreamEnded() {
			l.ended, l.endErr = true, grpcEnd(f)
		}
	case *http2.RSTStreamFrame:
		if f.StreamID == l.id {
			l.ended, l.endErr = true, fmt.Errorf("stream reset: %v", f.ErrCode)
		}
	case *http2.GoAwayFrame:
		return fmt.Errorf("EPP sent GOAWAY: %v %q", f.ErrCode, f.DebugData())
	}
	return nil
}

// grpcEnd is the error of trailers whose grpc-status is not 0 (nil for 0).
func grpcEnd(f *http2.MetaHeadersFrame) error {
	code, msg := "", ""
	for _, h := range f.RegularFields() {
		switch h.Name {
		case "grpc-status":
			code = h.Value
		case "grpc-message":
			msg = h.Value
		}
	}
	if code == "0" {
		return nil
	}
	if _, err := strconv.Atoi(code); err != nil {
		return fmt.Errorf("trailers without a grpc-status")
	}
	return fmt.Errorf("grpc-status %s: %s", code, msg)
}

// giveBack counts n received bytes against the connection window and
// returns them to the EPP in one update once half the window is used, as
// a proxy does (each stream's own window is never near spent: a stream
// gets the whole window and carries one request).
func (l *leanConn) giveBack(n int64) error {
	l.recvUsed += n
	if l.recvUsed < l.window/2 {
		return nil
	}
	if err := l.fr.WriteWindowUpdate(0, uint32(l.recvUsed)); err != nil {
		return err
	}
	l.recvUsed = 0
	return l.bw.Flush()
}
