// Package trtpoll drains TensorRT-LLM KV-cache events into a kvexact
// inventory. TensorRT-LLM has no PUB socket: its events sit in an engine
// ring buffer (kv_cache_config.event_buffer_max_size > 0) and are read with
// POST /kv_cache_events on the serving port. The read is destructive —
// whoever drains gets the events — so infergate must be the only consumer
// of each endpoint (no second router, no Dynamo, no curl).
//
// Each engine event becomes one synthetic batch applied with seq =
// event_id, so the inventory's gap and restart logic applies unchanged: a
// restarted engine starts again at event_id 0 (a regression, which clears
// the endpoint), and "created" (a fresh cache) clears it too. "stored"
// blocks carry their tokens and are keyed from them; a block whose token
// count is not the block size (the partial tail) is skipped. "updated"
// events (cache-level or priority moves) only advance the sequence. Only
// the first window_size seen is indexed (sliding-window models publish one
// block set per window).
//
// Before the first drain the poller asks GET /server_info: an engine that
// reports a tokens_per_block other than kvBlockSize is not drained (counted
// as rejected, logged once, asked again every RecheckInterval); engines that
// do not report it are admitted.
//
// One goroutine per engine URL keeps one drain outstanding at a time,
// sleeping Options.Interval between drains, and applies every drained event
// to each sink subscribed to that engine through the same Hub (several rules
// may name one engine; separate drains would split its events between their
// inventories). A successful drain marks each sink's endpoint connected
// (trust then follows the inventory's warm-up), a failed one disconnected;
// a sink joining a running drain starts from its next drain, untrusted until
// its warm-up. Admission is per sink (its kvBlockSize). Close unsubscribes a
// sink; the last Close stops the goroutine and waits for it.
package trtpoll
