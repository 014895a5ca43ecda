// Package kvfake is a fake inference-engine KV-event publisher for tests: it
// binds a real ZMQ PUB (XPUB) socket on loopback and, optionally, a ROUTER
// replay socket, and publishes vLLM-format three-frame messages in either
// event encoding (positional arrays or maps). Its msgpack encoder is written
// on vmihailenco/msgpack, independently of kvexact's hand-written decoder, so
// each checks the other.
package kvfake
