// Package accesslog writes the gateway's access log: one structured line per
// data request, after the response ended, to the daemon logger's output in
// its format (so --log-format json makes it one JSON object per line). The
// line is rendered by a pooled encoder, byte for byte what the logger's
// logrus formatter would write but without an allocation per line; logger
// setups it does not reproduce go through logrus itself. By default the
// encoder's lines are batched (Options.BufferBytes, buffer.go): whole lines
// in a bounded buffer, written at once when it fills or a flush interval
// passes, and dropped and counted rather than waited for when the output
// stalls; Logger.Close writes what is left.
//
// A line says what an operator needs to explain a request after the fact —
// which rule and VIP took it, what the ladder decided, which endpoints
// served it, how long the client waited for the first token and for the
// whole answer, how long each prefill/decode leg took, how many tokens were
// metered, and the request id that joins it to the engines' logs — and never
// what the client said: no prompt, no completion, no query string, no key.
//
// Sampling keeps the volume bounded on busy gateways: a fraction of the
// successful requests is logged, chosen from the request id (so every
// replica and a trace backend agree on which ones), while every failed
// request is always logged.
package accesslog
