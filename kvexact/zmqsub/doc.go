// Package zmqsub subscribes to engine KV-event publishers over real libzmq
// (github.com/pebbe/zmq4, cgo) and feeds a kvexact inventory through the
// narrow Sink interface.
//
// Start dials one SUB socket per (endpoint, DP rank) at
// tcp://<host>:<port+rank>, subscribed to all topics. libzmq reconnects by
// itself; a socket monitor reports connected/disconnected, exported as
// loxilb_kv_subscriber_connected and passed to Sink.SetConnected (warm-up
// and trust are the inventory's business). When a replay port is
// configured, the subscriber asks the engine's ROUTER socket (request: the
// start seq as 8 bytes big-endian; replies until the -1 end marker) for
// the buffered batches on every connect (from seq 0 the first time: a full
// rebuild is trusted at once) and whenever a live sequence gap appears;
// without replay a gap clears the rank (kvexact.Inventory.Apply).
//
// StartBind is the centralised topology: one SUB socket bound on an
// address, engines connect and are told apart by topic
// kv@<ip:port>@<model> or kv@<ip>@<model> (the sink resolves a bare IP);
// optional Allowed filters strangers, warned about once per topic. There
// is no connection per engine, so the subscriber reports none: the
// inventory learns liveness from the events (kvexact.Options.Passive).
//
// Every socket is owned by exactly one goroutine, which polls with
// Options.PollInterval so Close is prompt; Close stops the goroutines,
// closes every socket and terminates the ZMQ context.
package zmqsub
