package zmqsub

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/metrics"
)

// Sink is the narrow inventory surface the subscriber feeds;
// *kvexact.Inventory implements it.
type Sink interface {
	Apply(endpoint string, rank int, seq uint64, batch kvexact.Batch) kvexact.ApplyResult
	NextSeq(endpoint string, rank int) (uint64, bool)
	SetConnected(endpoint string, rank int, connected bool) error
	MarkRebuilt(endpoint string, rank int) error
}

var _ Sink = (*kvexact.Inventory)(nil)

// Defaults of Options.
const (
	DefaultPollInterval    = 100 * time.Millisecond
	DefaultReconnectIvl    = 100 * time.Millisecond
	DefaultReconnectIvlMax = 5 * time.Second
	DefaultReplayTimeout   = 5 * time.Second
	DefaultRcvHWM          = 100_000

	// ReplayPortOffset is LoxiLB's convention for where an engine's replay
	// ROUTER listens: PUB port + 1000 (clear of the DP-rank ports). The rule
	// model has no replay field yet; wiring may use Port+ReplayPortOffset.
	ReplayPortOffset = 1000
)

// Options configures subscribers.
type Options struct {
	Rule string // metric label and log field
	// PollInterval bounds how long Close waits for a goroutine to notice.
	PollInterval    time.Duration
	ReconnectIvl    time.Duration // libzmq reconnect backoff start
	ReconnectIvlMax time.Duration // and cap
	// ReplayTimeout bounds one replay exchange with the engine's ROUTER.
	ReplayTimeout time.Duration
	// ReplayOnConnect asks for the engine's buffered batches on every
	// (re)connect when a replay port is configured: from seq 0 on the first
	// connect (a full rebuild makes the inventory trusted at once), from the
	// next expected seq after a reconnect.
	ReplayOnConnect bool
	RcvHWM          int
	Metrics         *metrics.KV // nil: no metrics
	Logger          logrus.FieldLogger
}

// DefaultOptions returns the defaults for rule.
func DefaultOptions(rule string) Options {
	return Options{
		Rule:            rule,
		PollInterval:    DefaultPollInterval,
		ReconnectIvl:    DefaultReconnectIvl,
		ReconnectIvlMax: DefaultReconnectIvlMax,
		ReplayTimeout:   DefaultReplayTimeout,
		ReplayOnConnect: true,
		RcvHWM:          DefaultRcvHWM,
		Logger:          logrus.StandardLogger(),
	}
}

func (o *Options) fill() {
	d := DefaultOptions(o.Rule)
	if o.PollInterval <= 0 {
		o.PollInterval = d.PollInterval
	}
	if o.ReconnectIvl <= 0 {
		o.ReconnectIvl = d.ReconnectIvl
	}
	if o.ReconnectIvlMax <= 0 {
		o.ReconnectIvlMax = d.ReconnectIvlMax
	}
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = d.ReplayTimeout
	}
	if o.RcvHWM <= 0 {
		o.RcvHWM = d.RcvHWM
	}
	if o.Logger == nil {
		o.Logger = d.Logger
	}
}

// Target is one engine endpoint to dial (the "engines bind" topology).
type Target struct {
	Endpoint string // inventory key, the endpoint ID "ip:port"
	Host     string // address of the engine's PUB socket
	Port     int    // kvZmqPort; DP rank r publishes on Port+r
	Ranks    int    // kvDpRankCount, 0 → 1
	// ReplayPort is the engine's ROUTER replay port (rank r at ReplayPort+r);
	// 0 disables replay.
	ReplayPort int
}

// Subscriber owns the sockets and goroutines of one target (or one bound
// socket). Close stops everything and waits.
type Subscriber struct {
	ctx     *zmq.Context
	opts    Options
	sink    Sink
	stop    atomic.Bool
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
	// monitors numbers the inproc monitor addresses; inproc names are scoped
	// to the Subscriber's own ZMQ context.
	monitors atomic.Uint64
}

func newSubscriber(sink Sink, opts Options) (*Subscriber, error) {
	opts.fill()
	ctx, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("zmqsub: zmq context: %w", err)
	}
	return &Subscriber{ctx: ctx, opts: opts, sink: sink}, nil
}

// Start dials every DP rank of target with its own SUB socket, subscribed to
// all topics; libzmq reconnects by itself and a socket monitor reports the
// connection state.
func Start(target Target, sink Sink, opts Options) (*Subscriber, error) {
	if target.Ranks <= 0 {
		target.Ranks = 1
	}
	if target.Endpoint == "" || target.Host == "" || target.Port <= 0 || target.Port+target.Ranks-1 > 65535 {
		return nil, fmt.Errorf("zmqsub: invalid target %+v", target)
	}
	s, err := newSubscriber(sink, opts)
	if err != nil {
		return nil, err
	}
	var rs []*rankSub
	for r := 0; r < target.Ranks; r++ {
		rs1, err := s.openRank(target, r)
		if err != nil {
			for _, x := range rs {
				x.close()
			}
			_ = s.ctx.Term()
			return nil, err
		}
		rs = append(rs, rs1)
	}
	for _, x := range rs {
		s.wg.Add(1)
		go x.run()
	}
	return s, nil
}

// Close stops the goroutines, closes the sockets and terminates the context.
func (s *Subscriber) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.stop.Store(true)
	s.wg.Wait()
	if err := s.ctx.Term(); err != nil {
		return fmt.Errorf("zmqsub: terminate context: %w", err)
	}
	return nil
}

// rankSub is one (endpoint, rank) SUB socket and its monitor; both are used
// only by the rank's goroutine.
type rankSub struct {
	s        *Subscriber
	endpoint string
	rank     int
	rankStr  string
	addr     string
	replay   string // "" = no replay
	sub      *zmq.Socket
	mon      *zmq.Socket
	log      logrus.FieldLogger

	connectedOnce bool
	dupFloor      uint64 // drop live seq <= dupFloor right after a replay
	hasDupFloor   bool
	batch         kvexact.Batch
	msg           kvexact.Message
}

func (s *Subscriber) openRank(t Target, r int) (*rankSub, error) {
	x := &rankSub{
		s: s, endpoint: t.Endpoint, rank: r, rankStr: strconv.Itoa(r),
		addr: "tcp://" + net.JoinHostPort(t.Host, strconv.Itoa(t.Port+r)),
	}
	if t.ReplayPort > 0 {
		x.replay = "tcp://" + net.JoinHostPort(t.Host, strconv.Itoa(t.ReplayPort+r))
	}
	x.log = s.opts.Logger.WithFields(logrus.Fields{"rule": s.opts.Rule, "endpoint": t.Endpoint, "rank": r})
	var err error
	if x.sub, err = s.newSocket(zmq.SUB); err != nil {
		return nil, err
	}
	if x.mon, err = x.monitor(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED); err != nil {
		x.close()
		return nil, err
	}
	if err := x.sub.Connect(x.addr); err != nil {
		x.close()
		return nil, fmt.Errorf("zmqsub: connect %s: %w", x.addr, err)
	}
	return x, nil
}

func (s *Subscriber) newSocket(t zmq.Type) (*zmq.Socket, error) {
	sock, err := s.ctx.NewSocket(t)
	if err != nil {
		return nil, fmt.Errorf("zmqsub: new socket: %w", err)
	}
	err = errors.Join(
		sock.SetLinger(0),
		sock.SetReconnectIvl(s.opts.ReconnectIvl),
		sock.SetReconnectIvlMax(s.opts.ReconnectIvlMax),
		sock.SetRcvhwm(s.opts.RcvHWM),
		sock.SetIpv6(true), // engines may sit on IPv6 endpoints; IPv4 still works
	)
	if t == zmq.SUB && err == nil {
		err = sock.SetSubscribe("")
	}
	if err != nil {
		_ = sock.Close()
		return nil, fmt.Errorf("zmqsub: socket options: %w", err)
	}
	return sock, nil
}

// monitor attaches a socket monitor to x.sub and returns the PAIR end.
func (x *rankSub) monitor(events zmq.Event) (*zmq.Socket, error) {
	addr := fmt.Sprintf("inproc://zmqsub-monitor-%d", x.s.monitors.Add(1))
	if err := x.sub.Monitor(addr, events); err != nil {
		return nil, fmt.Errorf("zmqsub: monitor: %w", err)
	}
	mon, err := x.s.ctx.NewSocket(zmq.PAIR)
	if err != nil {
		return nil, fmt.Errorf("zmqsub: monitor socket: %w", err)
	}
	_ = mon.SetLinger(0)
	if err := mon.Connect(addr); err != nil {
		_ = mon.Close()
		return nil, fmt.Errorf("zmqsub: monitor connect: %w", err)
	}
	return mon, nil
}

func (x *rankSub) close() {
	if x.sub != nil {
		_ = x.sub.Monitor("", 0) // stop the monitor before closing its socket
		_ = x.sub.Close()
	}
	if x.mon != nil {
		_ = x.mon.Close()
	}
}

func (x *rankSub) setConnected(up bool) {
	if err := x.s.sink.SetConnected(x.endpoint, x.rank, up); err != nil {
		x.log.WithError(err).Warn("zmqsub: inventory refused the endpoint rank")
	}
	if m := x.s.opts.Metrics; m != nil {
		v := 0.0
		if up {
			v = 1
		}
		m.SubscriberConnected.WithLabelValues(x.s.opts.Rule, x.endpoint, x.rankStr).Set(v)
	}
}

func (x *rankSub) run() {
	defer x.s.wg.Done()
	defer x.close()
	defer func() {
		if x.connectedOnce {
			x.setConnected(false)
		}
	}()
	poller := zmq.NewPoller()
	poller.Add(x.sub, zmq.POLLIN)
	poller.Add(x.mon, zmq.POLLIN)
	for !x.s.stop.Load() {
		polled, err := poller.Poll(x.s.opts.PollInterval)
		if err != nil {
			if errors.Is(zmq.AsErrno(err), zmq.ETERM) {
				return
			}
			continue // EINTR and friends
		}
		for _, p := range polled {
			switch p.Socket {
			case x.mon:
				x.onMonitorEvent()
			case x.sub:
				x.drain()
			}
		}
	}
}

func (x *rankSub) onMonitorEvent() {
	ev, _, _, err := x.mon.RecvEvent(zmq.DONTWAIT)
	if err != nil {
		return
	}
	switch ev {
	case zmq.EVENT_CONNECTED:
		first := !x.connectedOnce
		x.connectedOnce = true
		x.setConnected(true)
		x.log.WithField("addr", x.addr).Info("zmqsub: connected to engine KV event publisher")
		if x.replay != "" && x.s.opts.ReplayOnConnect {
			x.replayFrom(first)
		}
	case zmq.EVENT_DISCONNECTED:
		x.setConnected(false)
		x.log.WithField("addr", x.addr).Info("zmqsub: disconnected from engine KV event publisher")
	}
}

// drain handles every message queued on the SUB socket, bounded so the
// monitor and Close are still served under a flood.
func (x *rankSub) drain() {
	for i := 0; i < 1024 && !x.s.stop.Load(); i++ {
		frames, err := x.sub.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			return
		}
		x.handle(frames, false)
	}
}

// handle decodes and applies one message; replayed messages skip the gap
// repair (they are the repair).
func (x *rankSub) handle(frames [][]byte, replayed bool) {
	if err := kvexact.DecodeMessage(frames, &x.msg, &x.batch); err != nil {
		if m := x.s.opts.Metrics; m != nil {
			m.DecodeErrors.WithLabelValues(x.s.opts.Rule, x.endpoint).Inc()
		}
		x.log.WithError(err).Debug("zmqsub: dropped undecodable KV event message")
		return
	}
	seq := x.msg.Seq
	if replayed {
		if next, ok := x.s.sink.NextSeq(x.endpoint, x.rank); ok && seq < next {
			return // overlap with what the live stream already applied
		}
	}
	if !replayed && x.hasDupFloor {
		if seq <= x.dupFloor {
			return // already applied by the replay
		}
		x.hasDupFloor = false
	}
	if !replayed && x.replay != "" {
		if next, ok := x.s.sink.NextSeq(x.endpoint, x.rank); ok && seq > next {
			x.log.WithFields(logrus.Fields{"seq": seq, "expected": next}).Info("zmqsub: sequence gap, requesting replay")
			x.replayRange(next)
			if next, ok = x.s.sink.NextSeq(x.endpoint, x.rank); ok && seq < next {
				return // the replay delivered this batch already
			}
		}
	}
	x.s.sink.Apply(x.endpoint, x.rank, seq, x.batch)
}
