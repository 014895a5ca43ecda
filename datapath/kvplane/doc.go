// Package kvplane owns the per-rule lifecycle of KV-exact routing: one
// kvexact inventory per rule with kvExactMode set, fed by exactly the
// eligible endpoints' event streams (the prefill endpoints of a P/D rule in
// mode 1, every endpoint of a single pool in mode 3), × DP ranks, and the
// Tier 1.5 decision built on it.
//
// The datapath calls Install on every rule change with the previous and
// the new compiled rule: unchanged endpoints keep their subscriber and
// inventory (no warm-up again), removed ones are closed and their blocks
// dropped, new ones are subscribed. A change of the KV settings themselves
// (port, block size, ranks, warm-up, engine) rebuilds the rule's inventory.
//
// Transports: vLLM and SGLang publish on ZMQ; by default the gateway dials
// every engine (endpointIP:kvZmqPort+rank, optional replay ROUTER at
// kvZmqPort+ReplayPortOffset). With Options.BindAddr the gateway binds one
// SUB socket shared by all rules and engines dial in with topic
// kv@<ip:port>@<model>. TensorRT-LLM endpoints are drained over HTTP
// (kvexact/trtpoll); infergate must be their only consumer.
//
// The request side: RuleKV.Tier gives the ladder's Tier 1.5 for mode 1,
// RuleKV.PickSingle the same decision for mode-3 pools (a miss keeps the
// rule's selector). Token ids come from the engine's /tokenize on a healthy
// endpoint (SetHealthy), cached and coalesced per rule; engines without
// /tokenize (TensorRT-LLM's trtllm-serve) route by Tier 1.5 only when the
// client sends token ids, every other request falls through counted as
// tokenize_failed. A zero-hit watchdog per rule warns when lookups keep
// missing while events flow (a parity problem, not a cold cache).
//
// kvWarmupSec (0: kvexact.DefaultWarmup) is how long an endpoint rank must
// have been connected, after a connect or a reset, before its inventory
// steers requests; a replay from sequence 0 trusts it at once.
package kvplane
