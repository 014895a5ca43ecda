package trtpoll

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/metrics"
)

// Sharing: a drain is destructive, so when several rules name one engine
// (or one rule names it twice) each poller of its own would take a share
// of the events and every inventory would see gaps. A Hub keeps one worker
// per engine URL: one drain outstanding, every decoded event applied to
// each subscribed sink in the drain's order, under the worker's lock so a
// sink that leaves gets nothing after Close returns. The worker runs while
// any subscriber names the engine; the last Close stops it.

// Hub shares one drain per engine URL among every sink that names it. The
// zero Hub is not usable; use NewHub. Safe for concurrent use.
type Hub struct {
	mu      sync.Mutex
	workers map[string]*worker // by Target.URL
}

// NewHub returns an empty Hub.
func NewHub() *Hub { return &Hub{workers: map[string]*worker{}} }

// Poller is one sink's subscription to an engine's drain.
type Poller struct {
	h    *Hub
	w    *worker
	s    *sub
	once sync.Once
}

// Start begins draining target into sink with a Hub of its own (nothing
// else shares the drain).
func Start(t Target, sink Sink, o Options) *Poller { return NewHub().Start(t, sink, o) }

// Start subscribes sink to t's drain, starting the drain when no one
// drains t.URL yet. The drain's pacing and limits (Interval, Timeout,
// MaxResponse, RecheckInterval, Client) are those of the subscriber that
// started it; Rule, BlockSize, Metrics and Logger are each subscriber's.
// A subscriber that joins a running drain starts as a fresh feed: its
// endpoint is connected at its first drain (the inventory's warm-up then
// applies) and sees the events drained from then on.
func (h *Hub) Start(t Target, sink Sink, o Options) *Poller {
	o = withDefaults(o)
	s := &sub{endpoint: t.Endpoint, sink: sink, o: o,
		log: o.Logger.WithFields(logrus.Fields{"rule": o.Rule, "endpoint": t.Endpoint})}
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.workers[t.URL]
	if w == nil {
		w = newWorker(t.URL, o)
		h.workers[t.URL] = w
		go w.run()
	}
	w.mu.Lock()
	w.subs = append(w.subs, s)
	w.nextCheck = time.Time{} // ask /server_info for the newcomer now
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return &Poller{h: h, w: w, s: s}
}

// Close unsubscribes the sink (marking its endpoint disconnected) and, when
// it was the drain's last subscriber, stops the drain and waits for it.
// Nothing is applied to the sink after Close returns.
func (p *Poller) Close() error {
	p.once.Do(func() { p.h.leave(p.w, p.s) })
	return nil
}

func (h *Hub) leave(w *worker, s *sub) {
	h.mu.Lock()
	w.mu.Lock()
	w.subs = slices.DeleteFunc(w.subs, func(x *sub) bool { return x == s })
	if s.connected {
		_ = s.sink.SetConnected(s.endpoint, 0, false)
		s.connected = false
	}
	last := len(w.subs) == 0
	w.mu.Unlock()
	if last {
		delete(h.workers, w.url)
		w.cancel()
	}
	h.mu.Unlock()
	if last {
		<-w.done
		w.o.Client.CloseIdleConnections()
	}
}

// withDefaults fills o's zero fields.
func withDefaults(o Options) Options {
	d := DefaultOptions(o.Rule)
	if o.Interval <= 0 {
		o.Interval = d.Interval
	}
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
	if o.BlockSize <= 0 {
		o.BlockSize = d.BlockSize
	}
	if o.MaxResponse <= 0 {
		o.MaxResponse = d.MaxResponse
	}
	if o.RecheckInterval <= 0 {
		o.RecheckInterval = d.RecheckInterval
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	}
	if o.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Logger = l
	}
	return o
}

// sub is one sink on a worker. Its state fields are guarded by worker.mu.
type sub struct {
	endpoint string
	sink     Sink
	o        Options
	log      logrus.FieldLogger

	admitted  bool  // /server_info agreed (or did not say) with o.BlockSize
	warned    bool  // the block-size mismatch was logged
	connected bool  // the sink was told connected
	failing   bool  // the last drain or apply failed (logged once)
	applyErr  error // this drain's apply failure
}

// worker drains one engine URL for its subscribers.
type worker struct {
	url    string
	o      Options // the starting subscriber's: pacing, limits, client
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{} // a subscriber joined

	mu        sync.Mutex
	subs      []*sub
	nextCheck time.Time          // when unadmitted subscribers are asked about again
	convs     map[int]*Converter // by block size: one window pinned per stream
	batch     kvexact.Batch
}

func newWorker(url string, o Options) *worker {
	w := &worker{url: url, o: o, done: make(chan struct{}), kick: make(chan struct{}, 1), convs: map[int]*Converter{}}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

func (w *worker) run() {
	defer close(w.done)
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-tick.C:
		case <-w.kick:
		}
		w.admit()
		if w.ctx.Err() != nil {
			continue
		}
		if !w.anyAdmitted() {
			tick.Reset(w.o.RecheckInterval)
			continue
		}
		body, err := w.drain()
		if w.ctx.Err() != nil {
			continue
		}
		w.publish(body, err)
		tick.Reset(w.o.Interval)
	}
}

// admit asks /server_info, when a subscriber awaits admission and its
// recheck is due, and admits every waiting subscriber whose block size the
// engine reports (or that the engine does not report). An engine whose
// blocks are another size would publish blocks no request key can match,
// and draining is destructive, so it is drained only for the subscribers
// that agree; the others are counted as rejected and asked again every
// RecheckInterval.
func (w *worker) admit() {
	w.mu.Lock()
	due := !time.Now().Before(w.nextCheck) && slices.ContainsFunc(w.subs, func(s *sub) bool { return !s.admitted })
	w.mu.Unlock()
	if !due {
		return
	}
	size, known := w.serverBlockSize()
	if w.ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextCheck = time.Now().Add(w.o.RecheckInterval)
	for _, s := range w.subs {
		if s.admitted {
			continue
		}
		if !known || size == s.o.BlockSize {
			s.admitted = true
			continue
		}
		if !s.warned {
			s.log.WithFields(logrus.Fields{"tokens_per_block": size, "kvBlockSize": s.o.BlockSize}).
				Warn("trtpoll: engine block size differs from kvBlockSize; its KV events are not drained")
			s.warned = true
		}
		if m := s.o.Metrics; m != nil {
			m.TRTPolls.WithLabelValues(s.o.Rule, s.endpoint, ResultRejected).Inc()
		}
	}
}

func (w *worker) anyAdmitted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.ContainsFunc(w.subs, func(s *sub) bool { return s.admitted })
}

// serverBlockSize asks /server_info for tokens_per_block; known is false
// when the engine does not say (older builds, unreachable): those are
// admitted and the drain itself reports what is wrong.
func (w *worker) serverBlockSize() (size int, known bool) {
	ctx, cancel := context.WithTimeout(w.ctx, w.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.url+PathServerInfo, nil)
	if err != nil {
		return 0, false
	}
	resp, err := w.o.Client.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return 0, false
	}
	var info map[string]json.RawMessage
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info) != nil {
		return 0, false
	}
	if err := json.Unmarshal(info[FieldTokensPerBlock], &size); err != nil || size <= 0 {
		return 0, false
	}
	return size, true
}

func (w *worker) drain() ([]byte, error) {
	ctx, cancel := context.WithTimeout(w.ctx, w.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url+PathKVCacheEvents, bytes.NewReader([]byte("{}")))
	if err != nil {
		return nil, fmt.Errorf("trtpoll: request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.o.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("trtpoll: drain %s: %w", w.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("trtpoll: drain %s: status %d", w.url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, w.o.MaxResponse))
	if err != nil {
		return nil, fmt.Errorf("trtpoll: read drain of %s: %w", w.url, err)
	}
	return body, nil
}

// publish hands one drain's outcome to every admitted subscriber: its
// events, in order, to each sink (converted once per block size), then a
// result per subscriber. A successful drain marks a sink connected (trust
// then follows the inventory's warm-up); a failed drain, or a failed apply
// into one sink, marks that sink disconnected.
func (w *worker) publish(body []byte, err error) {
	var envs []Envelope
	if err == nil {
		envs, err = Decode(body)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		for _, s := range w.subs {
			s.applyErr = nil
			if s.admitted && !s.connected {
				_ = s.sink.SetConnected(s.endpoint, 0, true)
				s.connected = true
			}
		}
		for i := range envs {
			w.applyEach(&envs[i])
		}
	}
	for _, s := range w.subs {
		if !s.admitted {
			continue
		}
		serr := err
		if serr == nil {
			serr = s.applyErr
		}
		s.result(serr, len(envs))
	}
}

// applyEach applies env to every admitted subscriber whose earlier events
// of this drain applied, converting it once per block size.
func (w *worker) applyEach(env *Envelope) {
	converted, seq, ok := 0, uint64(0), false
	for _, s := range w.subs {
		if !s.admitted || s.applyErr != nil {
			continue
		}
		if converted != s.o.BlockSize {
			c := w.convs[s.o.BlockSize]
			if c == nil {
				c = &Converter{BlockSize: s.o.BlockSize}
				w.convs[s.o.BlockSize] = c
			}
			seq, ok = c.Convert(env, &w.batch)
			converted = s.o.BlockSize
		}
		if !ok {
			continue
		}
		if res := s.sink.Apply(s.endpoint, 0, seq, w.batch); res.Err != nil {
			s.applyErr = fmt.Errorf("trtpoll: apply: %w", res.Err)
		}
	}
}

// result records one drain's outcome for s: the metric, the sink's
// connection and a log line when the drain starts or stops failing.
func (s *sub) result(err error, events int) {
	result := metrics.ResultOK
	if err != nil {
		result = metrics.ResultError
		if s.connected {
			_ = s.sink.SetConnected(s.endpoint, 0, false)
			s.connected = false
		}
		if !s.failing {
			s.log.WithError(err).Warn("trtpoll: KV event drain failed; the endpoint's inventory is untrusted until drains succeed")
			s.failing = true
		}
	} else if s.failing {
		s.log.WithField("events", events).Info("trtpoll: draining KV events again")
		s.failing = false
	}
	if m := s.o.Metrics; m != nil {
		m.TRTPolls.WithLabelValues(s.o.Rule, s.endpoint, result).Inc()
	}
}
