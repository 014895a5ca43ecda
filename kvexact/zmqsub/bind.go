package zmqsub

import (
	"errors"
	"fmt"
	"strings"

	zmq "github.com/pebbe/zmq4"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/kvexact"
)

// Topic layout of the centralised topology: engines connect to the
// gateway's bound SUB socket and publish with topic kv@<ip:port>@<model>.
const (
	TopicPrefix = "kv@"
	topicSep    = "@"
)

// ParseTopic splits kv@<endpoint>@<model>; the model may itself contain "@".
// The endpoint is "ip:port" or, as many deployments publish, a bare IP
// (kv@<ip>@<model>); resolving a bare IP to a rule endpoint is the sink's
// business.
func ParseTopic(topic string) (endpoint, model string, ok bool) {
	rest, found := strings.CutPrefix(topic, TopicPrefix)
	if !found {
		return "", "", false
	}
	endpoint, model, found = strings.Cut(rest, topicSep)
	if !found || endpoint == "" {
		return "", "", false
	}
	return endpoint, model, true
}

// BindTarget is the centralised topology: one SUB socket bound on Addr.
type BindTarget struct {
	Addr string // e.g. "tcp://0.0.0.0:5557"
	// Allowed admits an endpoint from the topic (ip:port or bare ip); nil
	// admits all. Anyone who can reach Addr can publish, so production
	// wiring should pass the rules' endpoint set.
	Allowed func(endpoint string) bool
}

// maxWarnedStrangers bounds the set of refused topic endpoints warned about
// once each (a hostile publisher cannot grow it without bound).
const maxWarnedStrangers = 256

// StartBind binds a SUB socket subscribed to TopicPrefix; each message is
// attributed to (topic endpoint, batch data_parallel_rank or 0). Without a
// per-engine connection there is no monitor signal and no replay: the sink
// learns liveness from the events themselves (kvexact.Options.Passive), so
// an inventory built while events already flow connects on its next event.
func StartBind(target BindTarget, sink Sink, opts Options) (*Subscriber, string, error) {
	s, err := newSubscriber(sink, opts)
	if err != nil {
		return nil, "", err
	}
	sock, err := s.newSocket(zmq.SUB)
	if err == nil {
		// newSocket subscribed to everything; narrow it to the kv@ topics.
		err = errors.Join(sock.SetUnsubscribe(""), sock.SetSubscribe(TopicPrefix))
		if err == nil {
			err = sock.Bind(target.Addr)
		}
	}
	if err != nil {
		if sock != nil {
			_ = sock.Close()
		}
		_ = s.ctx.Term()
		return nil, "", fmt.Errorf("zmqsub: bind %s: %w", target.Addr, err)
	}
	bound, _ := sock.GetLastEndpoint()
	b := &bindSub{s: s, sock: sock, allowed: target.Allowed, warned: map[string]bool{}}
	s.wg.Add(1)
	go b.run()
	return s, bound, nil
}

type bindSub struct {
	s       *Subscriber
	sock    *zmq.Socket
	allowed func(string) bool
	warned  map[string]bool // topic endpoints refused and warned about
	batch   kvexact.Batch
	msg     kvexact.Message
}

func (b *bindSub) run() {
	defer b.s.wg.Done()
	defer b.sock.Close()
	poller := zmq.NewPoller()
	poller.Add(b.sock, zmq.POLLIN)
	for !b.s.stop.Load() {
		polled, err := poller.Poll(b.s.opts.PollInterval)
		if err != nil || len(polled) == 0 {
			continue
		}
		for i := 0; i < 1024 && !b.s.stop.Load(); i++ {
			frames, err := b.sock.RecvMessageBytes(zmq.DONTWAIT)
			if err != nil {
				break
			}
			b.handle(frames)
		}
	}
}

func (b *bindSub) handle(frames [][]byte) {
	m := b.s.opts.Metrics
	err := kvexact.DecodeMessage(frames, &b.msg, &b.batch)
	endpoint, _, ok := ParseTopic(b.msg.Topic)
	if err == nil && !ok {
		err = fmt.Errorf("topic %q is not %s<ip[:port]>@<model>", b.msg.Topic, TopicPrefix)
	}
	if err == nil && b.allowed != nil && !b.allowed(endpoint) {
		err = fmt.Errorf("endpoint %q is not part of the rule", endpoint)
	}
	if err != nil {
		if m != nil {
			m.DecodeErrors.WithLabelValues(b.s.opts.Rule, endpoint).Inc()
		}
		log := b.s.opts.Logger.WithError(err).WithFields(logrus.Fields{"rule": b.s.opts.Rule, "topic": b.msg.Topic})
		// A misconfigured engine topic is an operator's problem: say it once
		// at warning level, then keep counting quietly.
		if key := b.msg.Topic; !b.warned[key] && len(b.warned) < maxWarnedStrangers {
			b.warned[key] = true
			log.Warn("zmqsub: dropped KV event messages on the bound socket (further drops of this topic are logged at debug)")
		} else {
			log.Debug("zmqsub: dropped KV event message")
		}
		return
	}
	rank := 0
	if b.batch.HasRank {
		rank = b.batch.DPRank
	}
	b.s.sink.Apply(endpoint, rank, b.msg.Seq, b.batch)
}
