// Package enginestats reads the engines' own view of their load: it scrapes
// each endpoint's Prometheus text exposition (vLLM, SGLang, TensorRT-LLM,
// llama.cpp) on a short interval and publishes, per endpoint, one immutable
// Snapshot behind an atomic pointer (a Cell). Pickers read the last snapshot
// and never wait for a scrape; the scraper never touches the request path.
//
// Why scrape at all: the gateway's own in-flight counts miss every request
// that did not pass through this process (another replica, a batch job, a
// client talking straight to the engine), and say nothing about KV pressure.
//
// Trust: a snapshot is a signal only while it is fresh (Options.StaleAfter
// after the last good scrape). A scrape that fails — connect error, timeout,
// non-200, a body over Options.MaxBytes, text that is not the exposition
// format, a NaN, infinite or negative gauge — never replaces the last good
// values; it is counted by reason and the reason is kept on the snapshot so
// /status can say why a signal is missing. A counter that goes backwards is
// an engine restart: its delta is ignored (reason counter_reset) while the
// gauges of that scrape, which are absolute, are kept. Engines that export
// none of the known families give no signal (reason no_signal): routing
// behaves as it did without this package.
//
// Cost: targets that ask the same URL of the same dialect with the same
// client share one scrape, published to each of them (thousands of rules
// naming one engine cost one scrape per interval, not one per rule). One
// scheduler goroutine starts every distinct scrape in bursts (up to 64
// once per interval, more in bursts spread over it) and one goroutine per
// distinct scrape handles what cannot be done at once. On a
// plaintext keep-alive connection the scheduler writes the request and
// reads and publishes the answer itself once it has arrived whole,
// polling the burst's sockets with short sleeps: one write and one read
// per scrape, no thread hand-off, and the snapshot, taken from a
// per-worker slab allocated once every 16 scrapes (scraper.go). Those
// sockets are off the runtime's poller (on Linux), so an arriving answer
// wakes nothing. Dials, TLS targets (net/http) and engines slower than
// the scheduler waits go to the scrape's goroutine, which polls until
// the scrape's deadline. The parser looks only at the handful of
// families in the engine's table (expfmt would build every family,
// histograms included, on every scrape), and the request asks the
// engine for those only (name[]). TestScrapeCost measures it: about
// 0.8–1.1 % of one core for 64 endpoints at 250 ms on a loaded 2-core
// host, where a timer and a round trip per target cost 6–9 %
// (docs/performance.md).
//
// The package is pure of the datapath: it knows targets (URL, engine, metric
// labels, the Cell to publish into); the datapath decides which endpoints are
// targets and follows rule installs, updates and deletes with Set and Drop.
package enginestats
