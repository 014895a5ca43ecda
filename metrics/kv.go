package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// KV covers the KV-exact tier's event ingest and block inventory (kvexact).
// Label "rule" is the rule name, "endpoint" the endpoint ID (ip:port) and
// "rank" the data-parallel rank, so cardinality is bounded by configuration.
type KV struct {
	Blocks              *prometheus.GaugeVec   // loxilb_pd_kv_blocks{rule,endpoint}
	EventsApplied       *prometheus.CounterVec // loxilb_kv_events_applied_total{rule,type}
	UnknownEvents       *prometheus.CounterVec // loxilb_kv_unknown_events_total{rule}
	DecodeErrors        *prometheus.CounterVec // loxilb_kv_decode_errors_total{rule,endpoint}
	SeqGaps             *prometheus.CounterVec // loxilb_kv_seq_gaps_total{rule,endpoint,rank}
	Restarts            *prometheus.CounterVec // loxilb_kv_restarts_total{rule,endpoint,rank}
	Replays             *prometheus.CounterVec // loxilb_kv_replays_total{rule,endpoint,result}
	SubscriberConnected *prometheus.GaugeVec   // loxilb_kv_subscriber_connected{rule,endpoint,rank}
	BlockSizeMismatches *prometheus.CounterVec // loxilb_kv_block_size_mismatches_total{rule,endpoint}
	SkippedBlocks       *prometheus.CounterVec // loxilb_kv_skipped_blocks_total{rule,reason}
	Evictions           *prometheus.CounterVec // loxilb_pd_kv_inv_cap_evictions_total{rule}
	// Routing is the request side (tokenisation, Tier 1.5, watchdog).
	Routing *KVRouting

	lastEvent *lastEventCollector // loxilb_kv_last_event_age_seconds{rule,endpoint}

	// Publishers that deviate from vLLM's encoding.
	kvInterop
}

// NewKV builds the KV metric set and registers it on reg.
func NewKV(reg prometheus.Registerer) *KV {
	k := &KV{
		Blocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loxilb_pd_kv_blocks",
			Help: "Blocks indexed for an endpoint (summed over its DP ranks and tiers).",
		}, []string{"rule", "endpoint"}),
		EventsApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_events_applied_total",
			Help: "KV events applied to the inventory, by event type.",
		}, []string{"rule", "type"}),
		UnknownEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_unknown_events_total",
			Help: "KV events with an unknown tag, skipped (engine newer than the gateway).",
		}, []string{"rule"}),
		DecodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_decode_errors_total",
			Help: "KV event messages that failed to decode and were dropped.",
		}, []string{"rule", "endpoint"}),
		SeqGaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_seq_gaps_total",
			Help: "Forward sequence gaps not repaired by replay; the rank's inventory was cleared.",
		}, []string{"rule", "endpoint", "rank"}),
		Restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_restarts_total",
			Help: "Sequence regressions (engine restarts); the rank's inventory was cleared.",
		}, []string{"rule", "endpoint", "rank"}),
		Replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_replays_total",
			Help: "Replay requests to the engine ROUTER socket, by result (ok, partial, error).",
		}, []string{"rule", "endpoint", "result"}),
		SubscriberConnected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loxilb_kv_subscriber_connected",
			Help: "1 while the ZMQ SUB socket of an endpoint rank is connected (socket monitor).",
		}, []string{"rule", "endpoint", "rank"}),
		BlockSizeMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_block_size_mismatches_total",
			Help: "BlockStored events whose block_size differs from the inventory's; not indexed.",
		}, []string{"rule", "endpoint"}),
		SkippedBlocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_skipped_blocks_total",
			Help: "Stored blocks not indexed, by reason (unanchored, extra_keys, tokens, medium, group).",
		}, []string{"rule", "reason"}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_pd_kv_inv_cap_evictions_total",
			Help: "Blocks evicted by the per-rule block budget (least recently stored first).",
		}, []string{"rule"}),
		lastEvent: &lastEventCollector{
			desc: prometheus.NewDesc("loxilb_kv_last_event_age_seconds",
				"Seconds since the last KV event batch from an endpoint.", []string{"rule", "endpoint"}, nil),
			last: map[[2]string]time.Time{},
			now:  time.Now,
		},
	}
	reg.MustRegister(k.Blocks, k.EventsApplied, k.UnknownEvents, k.DecodeErrors, k.SeqGaps, k.Restarts,
		k.Replays, k.SubscriberConnected, k.BlockSizeMismatches, k.SkippedBlocks, k.Evictions, k.lastEvent)
	k.Routing = NewKVRouting(reg)
	k.kvInterop = newKVInterop(reg)
	return k
}

// ObserveEvent records that a batch from endpoint arrived at t.
func (k *KV) ObserveEvent(rule, endpoint string, t time.Time) {
	k.lastEvent.mu.Lock()
	k.lastEvent.last[[2]string{rule, endpoint}] = t
	k.lastEvent.mu.Unlock()
}

// ForgetEndpoint drops an endpoint's per-endpoint series (endpoint removed
// from the rule), so stale series do not linger.
func (k *KV) ForgetEndpoint(rule, endpoint string) {
	k.lastEvent.mu.Lock()
	delete(k.lastEvent.last, [2]string{rule, endpoint})
	k.lastEvent.mu.Unlock()
	l := prometheus.Labels{"rule": rule, "endpoint": endpoint}
	k.Blocks.DeletePartialMatch(l)
	k.DecodeErrors.DeletePartialMatch(l)
	k.SeqGaps.DeletePartialMatch(l)
	k.Restarts.DeletePartialMatch(l)
	k.Replays.DeletePartialMatch(l)
	k.SubscriberConnected.DeletePartialMatch(l)
	k.BlockSizeMismatches.DeletePartialMatch(l)
}

// lastEventCollector computes ages at scrape time, which a plain gauge set at
// event time cannot do (a silent engine would look fresh forever).
type lastEventCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	last map[[2]string]time.Time
	now  func() time.Time
}

func (c *lastEventCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lastEventCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for k, t := range c.last {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, now.Sub(t).Seconds(), k[0], k[1])
	}
}
