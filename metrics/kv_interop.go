package metrics

import "github.com/prometheus/client_golang/prometheus"

// kvInterop are the KV families about publishers that deviate from vLLM's
// reference encoding: counted so an operator sees the gateway
// adapting instead of silently dropping.
type kvInterop struct {
	RootParentZero  *prometheus.CounterVec // loxilb_kv_root_parent_zero_total{rule}
	AmbiguousTopics *prometheus.CounterVec // loxilb_kv_ambiguous_topic_total{rule,ip}
	LocalTokenize   *prometheus.CounterVec // loxilb_kv_local_tokenize_total{rule,result}
}

func newKVInterop(reg prometheus.Registerer) kvInterop {
	k := kvInterop{
		RootParentZero: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_root_parent_zero_total",
			Help: "BlockStored events whose unknown parent_block_hash 0 was read as a root block.",
		}, []string{"rule"}),
		AmbiguousTopics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_ambiguous_topic_total",
			Help: "Messages on a port-less topic kv@<ip>@<model> dropped because several endpoints of the rule have that IP.",
		}, []string{"rule", "ip"}),
		LocalTokenize: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loxilb_kv_local_tokenize_total",
			Help: "Tier 1.5 tokenisations by the in-process tokenizer: ok, fallback (asked the engine's /tokenize), none (neither could).",
		}, []string{"rule", "result"}),
	}
	reg.MustRegister(k.RootParentZero, k.AmbiguousTopics, k.LocalTokenize)
	return k
}
