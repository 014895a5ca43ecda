package kvfake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// replayEndSeq is the end-of-replay marker: -1 as 8-byte signed big-endian.
const replayEndSeq = "\xff\xff\xff\xff\xff\xff\xff\xff"

// Options configures a fake publisher.
type Options struct {
	// PubAddr is the PUB bind address; "tcp://127.0.0.1:*" picks a free port.
	PubAddr string
	// ConnectAddr, when set, connects the PUB socket to a gateway's bound
	// SUB socket instead of binding (the centralised topology).
	ConnectAddr string
	// ReplayAddr binds a ROUTER replay socket when non-empty.
	ReplayAddr string
	Topic      string
	Encoding   Encoding
	// ReplayBuffer is how many batches the replay socket keeps (vLLM
	// buffer_steps).
	ReplayBuffer int
}

// DefaultOptions binds a PUB socket on a free loopback port, no replay.
func DefaultOptions() Options {
	return Options{PubAddr: "tcp://127.0.0.1:*", ReplayBuffer: 10_000}
}

type stored struct {
	seq     uint64
	payload []byte
}

// Publisher is a fake engine KV-event publisher on real ZMQ sockets.
type Publisher struct {
	opts  Options
	ctx   *zmq.Context
	mu    sync.Mutex // guards pub, next, buf, subs
	pub   *zmq.Socket
	next  uint64
	buf   []stored
	subs  int
	pubEP string

	router   *zmq.Socket // owned by the replay goroutine
	replayEP string
	stop     chan struct{}
	done     chan struct{}
}

// Start binds the sockets.
func Start(opts Options) (*Publisher, error) {
	if opts.PubAddr == "" {
		opts.PubAddr = DefaultOptions().PubAddr
	}
	if opts.ReplayBuffer <= 0 {
		opts.ReplayBuffer = DefaultOptions().ReplayBuffer
	}
	ctx, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("kvfake: zmq context: %w", err)
	}
	p := &Publisher{opts: opts, ctx: ctx, stop: make(chan struct{}), done: make(chan struct{})}
	fail := func(err error) (*Publisher, error) {
		p.closeSockets()
		_ = ctx.Term()
		return nil, err
	}
	// XPUB (wire-identical to PUB for subscribers) lets tests wait until
	// subscriptions arrived instead of sleeping through ZMQ's slow joiner.
	if p.pub, err = ctx.NewSocket(zmq.XPUB); err != nil {
		return fail(fmt.Errorf("kvfake: xpub socket: %w", err))
	}
	_ = p.pub.SetLinger(0)
	_ = p.pub.SetXpubVerbose(1)
	_ = p.pub.SetIpv6(true)
	if opts.ConnectAddr != "" {
		if err := p.pub.Connect(opts.ConnectAddr); err != nil {
			return fail(fmt.Errorf("kvfake: connect %s: %w", opts.ConnectAddr, err))
		}
		p.pubEP = opts.ConnectAddr
	} else {
		if err := p.pub.Bind(opts.PubAddr); err != nil {
			return fail(fmt.Errorf("kvfake: bind %s: %w", opts.PubAddr, err))
		}
		p.pubEP, _ = p.pub.GetLastEndpoint()
	}
	if opts.ReplayAddr != "" {
		if p.router, err = ctx.NewSocket(zmq.ROUTER); err != nil {
			return fail(fmt.Errorf("kvfake: router socket: %w", err))
		}
		_ = p.router.SetLinger(0)
		_ = p.router.SetIpv6(true)
		if err := p.router.Bind(opts.ReplayAddr); err != nil {
			return fail(fmt.Errorf("kvfake: bind %s: %w", opts.ReplayAddr, err))
		}
		p.replayEP, _ = p.router.GetLastEndpoint()
		go p.serveReplay()
	} else {
		close(p.done)
	}
	return p, nil
}

// Endpoint is the bound PUB endpoint (tcp://127.0.0.1:port).
func (p *Publisher) Endpoint() string { return p.pubEP }

// ReplayEndpoint is the bound ROUTER endpoint, "" without replay.
func (p *Publisher) ReplayEndpoint() string { return p.replayEP }

// Publish sends b with the next sequence number and returns that number.
func (p *Publisher) Publish(b Batch) (uint64, error) {
	p.mu.Lock()
	seq := p.next
	p.mu.Unlock()
	return seq, p.PublishSeq(seq, b)
}

// PublishSeq sends b with an explicit sequence number (to fake gaps and
// restarts); later Publish calls continue from seq+1.
func (p *Publisher) PublishSeq(seq uint64, b Batch) error {
	raw, err := Encode(b, p.opts.Encoding)
	if err != nil {
		return err
	}
	return p.PublishRaw(seq, raw)
}

// PublishRaw sends an already encoded payload.
func (p *Publisher) PublishRaw(seq uint64, payload []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	seqFrame := binary.BigEndian.AppendUint64(nil, seq)
	if _, err := p.pub.SendMessage([]byte(p.opts.Topic), seqFrame, payload); err != nil {
		return fmt.Errorf("kvfake: publish seq %d: %w", seq, err)
	}
	p.next = seq + 1
	p.buf = append(p.buf, stored{seq, payload})
	if len(p.buf) > p.opts.ReplayBuffer {
		p.buf = p.buf[len(p.buf)-p.opts.ReplayBuffer:]
	}
	return nil
}

// Drop consumes the next sequence number for b and keeps b in the replay
// buffer without sending it: a message lost on the way (HWM overflow).
func (p *Publisher) Drop(b Batch) (uint64, error) {
	raw, err := Encode(b, p.opts.Encoding)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.next
	p.next++
	p.buf = append(p.buf, stored{seq, raw})
	return seq, nil
}

// ForgetReplay drops buffered batches before seq (an engine whose replay
// buffer has rolled over).
func (p *Publisher) ForgetReplay(before uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.buf[:0]
	for _, s := range p.buf {
		if s.seq >= before {
			kept = append(kept, s)
		}
	}
	p.buf = kept
}

// WaitSubscribers waits until n subscriptions arrived on the XPUB socket.
func (p *Publisher) WaitSubscribers(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		for {
			msg, err := p.pub.RecvBytes(zmq.DONTWAIT)
			if err != nil {
				break
			}
			if len(msg) > 0 && msg[0] == 1 {
				p.subs++
			}
		}
		got := p.subs
		p.mu.Unlock()
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kvfake: %d of %d subscriptions after %v", got, n, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *Publisher) serveReplay() {
	defer close(p.done)
	poller := zmq.NewPoller()
	poller.Add(p.router, zmq.POLLIN)
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		polled, err := poller.Poll(20 * time.Millisecond)
		if err != nil || len(polled) == 0 {
			continue
		}
		msg, err := p.router.RecvMessageBytes(0)
		if err != nil || len(msg) != 3 || len(msg[2]) != 8 {
			continue // vLLM ignores malformed requests too
		}
		id, start := msg[0], binary.BigEndian.Uint64(msg[2])
		p.mu.Lock()
		var todo []stored
		for _, s := range p.buf {
			if s.seq >= start {
				todo = append(todo, s)
			}
		}
		p.mu.Unlock()
		for _, s := range todo {
			_, _ = p.router.SendMessage(id, []byte{}, binary.BigEndian.AppendUint64(nil, s.seq), s.payload)
		}
		_, _ = p.router.SendMessage(id, []byte{}, []byte(replayEndSeq), []byte{})
	}
}

func (p *Publisher) closeSockets() {
	if p.pub != nil {
		_ = p.pub.Close()
	}
	if p.router != nil {
		_ = p.router.Close()
	}
}

// Close stops the replay loop, closes the sockets and terminates the context.
func (p *Publisher) Close() error {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	p.closeSockets()
	p.mu.Unlock()
	return errors.Join(p.ctx.Term())
}
