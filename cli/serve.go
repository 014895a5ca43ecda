package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/infergate/infergate/daemon"
	"github.com/spf13/cobra"
)

func newServeCmd(g *globals) *cobra.Command {
	opts := daemon.DefaultOptions()
	var kvTokenizers []string // --kv-tokenizer MODEL=PATH | PATH
	var sources serveSources  // --config, --print-config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: management API, rule store and datapath",
		Args:  exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if err := loadServeOptions(cmd.Flags(), sources, &opts, g.env.Getenv); err != nil {
				return usageError{err}
			}
			if err := applyServeEnv(cmd, &opts, g.env.Getenv); err != nil {
				return err
			}
			if cmd.Flags().Changed("kv-tokenizer") { // else a --config file's map stands
				var err error
				if opts.KV.Tokenizers, err = daemon.ParseTokenizers(kvTokenizers); err != nil {
					return usagef("--kv-tokenizer: %v", err)
				}
			}
			if sources.print {
				out, err := renderServeOptions(&opts, nil)
				if err != nil {
					return err
				}
				_, err = g.env.Stdout.Write(out)
				return err
			}
			if g.env.Serve == nil {
				return errors.New("serve is not available in this build")
			}
			log, err := newServeLogger(opts, g.env.Stderr)
			if err != nil {
				return err
			}
			if err := opts.Tracing.Validate(); err != nil {
				return usagef("--%v", err)
			}
			// Cancelling ctx is the daemon's graceful shutdown: drain, then exit.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := g.env.Serve(ctx, opts, log); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.APIAddr, "api-addr", opts.APIAddr, "management API listen address")
	fl.StringVar(&opts.StateDir, "state-dir", opts.StateDir, "directory of the persisted rule set")
	fl.BoolVar(&opts.RulesJournal.Enabled, "rules-journal", opts.RulesJournal.Enabled, "file store: append each rule write to rules.journal (one fsynced record) instead of rewriting rules.json; compacted into rules.json at the bounds below and at shutdown (false: every write rewrites rules.json)")
	fl.Int64Var(&opts.RulesJournal.MaxBytes, "rules-journal-max-bytes", opts.RulesJournal.MaxBytes, "file store: compact the rule journal into rules.json past this size")
	fl.IntVar(&opts.RulesJournal.MaxRecords, "rules-journal-max-records", opts.RulesJournal.MaxRecords, "file store: compact the rule journal into rules.json after this many records")
	fl.DurationVar(&opts.RulesJournal.MaxAge, "rules-journal-max-age", opts.RulesJournal.MaxAge, "file store: compact the rule journal into rules.json this long after the first write rules.json lacks")
	fl.StringVar(&opts.RulesPath, "rules", opts.RulesPath, "YAML rule file or directory applied at boot (kind: Loadbalancer; also kind: ApiKey and TenantLimit, docs/tenants.md)")
	fl.BoolVar(&opts.BindAnyVIP, "bind-any-vip", opts.BindAnyVIP, "serve non-local VIPs on 0.0.0.0:<port>")
	fl.BoolVar(&opts.SSEModeEnforcesKeys, "sse-mode-enforces-keys", opts.SSEModeEnforcesKeys, "tenant keys: sse_mode rules without api_key_auth require API keys (LoxiLB's behaviour)")
	fl.IntVar(&opts.Tenant.MaxKeysPerTenant, "tenant-max-keys", opts.Tenant.MaxKeysPerTenant, "tenant keys: most API keys one tenant may have")
	fl.IntVar(&opts.Tenant.DefaultMaxTokens, "tenant-default-max-tokens", opts.Tenant.DefaultMaxTokens, "tenant keys: completion tokens reserved for a request without max_tokens")
	fl.StringVar(&opts.LogLevel, "log-level", opts.LogLevel, "log level: debug|info|warn|error")
	fl.StringVar(&opts.LogFormat, "log-format", opts.LogFormat, "log format: text|json (one JSON object per line)")
	fl.BoolVar(&opts.AccessLog.Enabled, "access-log", opts.AccessLog.Enabled, "write one info line per data request (rule, VIP, status, tier, endpoints, TTFT, durations, metered tokens, request id; never a prompt or a key)")
	fl.StringVar(&opts.Tracing.Endpoint, "otlp-endpoint", opts.Tracing.Endpoint, "export OpenTelemetry traces to this OTLP/HTTP collector, e.g. http://127.0.0.1:4318 (empty: tracing off)")
	fl.Float64Var(&opts.Tracing.SampleRatio, "trace-sample-ratio", opts.Tracing.SampleRatio, "share of new traces recorded (0..1); a client's traceparent decides for its own trace")
	fl.StringVar(&opts.Tracing.ServiceName, "trace-service-name", opts.Tracing.ServiceName, "service.name of the exported traces")
	fl.Float64Var(&opts.AccessLog.SampleRate, "access-log-sample", opts.AccessLog.SampleRate, "fraction of successful requests the access log writes, chosen by request id (0..1); failed requests are always written")
	fl.IntVar(&opts.AccessLog.BufferBytes, "access-log-buffer", opts.AccessLog.BufferBytes, "batch access lines into writes of up to this many bytes (0: one write per line); memory is bounded at two buffers, and lines that find both full while the output stalls are dropped and counted in infergate_access_log_dropped_lines_total")
	fl.DurationVar(&opts.AccessLog.FlushEvery, "access-log-flush", opts.AccessLog.FlushEvery, "longest a buffered access line waits before it is written")
	// TLS.
	fl.StringVar(&opts.TLS.CertRoot, "cert-root", opts.TLS.CertRoot, "LoxiLB certificate root for HTTPS VIPs: <root>/server.crt|key is the default certificate, <root>/<hostname>/ a host's (default <state-dir>/cert)")
	fl.Float64Var(&opts.TLS.HandshakesPerIP, "tls-handshakes-per-ip", opts.TLS.HandshakesPerIP, "TLS handshakes one client source (IPv4 address, IPv6 /64) may start per second on the VIPs; above it handshakes are refused after the ClientHello (0: no limit)")
	fl.IntVar(&opts.TLS.HandshakeBurstPerIP, "tls-handshake-burst-per-ip", opts.TLS.HandshakeBurstPerIP, "burst of TLS handshakes above --tls-handshakes-per-ip (0: the rate)")
	fl.StringVar(&opts.APITLSCert, "api-tls-cert", opts.APITLSCert, "serve the management API over HTTPS with this certificate (PEM)")
	fl.StringVar(&opts.APITLSKey, "api-tls-key", opts.APITLSKey, "private key (PEM) of --api-tls-cert")
	fl.StringVar(&opts.APITLSClientCA, "api-tls-client-ca", opts.APITLSClientCA, "require management API clients to present a certificate from this CA (mTLS)")
	fl.DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", opts.ShutdownTimeout, "bound on the graceful API shutdown after SIGINT/SIGTERM")
	fl.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", opts.MaxBodyBytes, "largest request body read for routing (413 above)")
	fl.IntVar(&opts.BreakerConnectFailures, "breaker-connect-failures", opts.BreakerConnectFailures, "consecutive connect failures that open an endpoint's breaker")
	fl.IntVar(&opts.BreakerPDConnectFailures, "breaker-pd-connect-failures", opts.BreakerPDConnectFailures, "same, on P/D rules")
	fl.IntVar(&opts.Breaker5xxStreak, "breaker-5xx-streak", opts.Breaker5xxStreak, "origin 5xx streak that opens a single-pool endpoint's breaker (0 disables it; P/D rules use --breaker-pd-5xx-streak)")
	fl.IntVar(&opts.BreakerPD5xxStreak, flagBreakerPD5xxStreak, opts.BreakerPD5xxStreak, "origin 5xx streak that opens a P/D endpoint's breaker (LoxiLB's default 3; 0 disables it; env "+envPDOriginErrThreshold+" when the flag is not given)")
	fl.DurationVar(&opts.BreakerOpenFor, "breaker-open-for", opts.BreakerOpenFor, "how long an open breaker stays open")
	fl.DurationVar(&opts.DrainGrace, "drain-grace", opts.DrainGrace, "in-flight drain window on rule delete/update")
	fl.DurationVar(&opts.UpstreamIdleTimeout, "upstream-idle-timeout", opts.UpstreamIdleTimeout, "close an engine keep-alive connection idle this long (0: never)")
	fl.DurationVar(&opts.PrefillTimeout, "prefill-timeout", opts.PrefillTimeout, "P/D prefill leg timeout")
	fl.DurationVar(&opts.DecodeFirstByteTimeout, "decode-first-byte-timeout", opts.DecodeFirstByteTimeout, "P/D decode time-to-first-byte timeout")
	// Bodies nothing routes on stream through unread.
	fl.Int64Var(&opts.MaxStreamedBodyBytes, "max-streamed-body-bytes", opts.MaxStreamedBodyBytes, "largest request body streamed through unread, e.g. an audio upload (413 above)")
	fl.DurationVar(&opts.StreamedBodyTimeout, "streamed-body-timeout", opts.StreamedBodyTimeout, "bound on delivering a streamed request body as a whole")
	fl.StringVar(&opts.KV.BindAddr, "kv-bind-addr", opts.KV.BindAddr, "KV-exact: bind one ZMQ SUB socket here (e.g. tcp://0.0.0.0:5557) and let engines connect with topic kv@<ip:port>@<model>; empty dials every engine")
	fl.IntVar(&opts.KV.ReplayPortOffset, "kv-replay-port-offset", opts.KV.ReplayPortOffset, "KV-exact: engine replay ROUTER at kvZmqPort+offset (0: no replay)")
	fl.DurationVar(&opts.KV.TokenizeTimeout, "kv-tokenize-timeout", opts.KV.TokenizeTimeout, "KV-exact: budget of one engine /tokenize call for a short prompt; a long prompt may wait up to the prefill a cache hit would save it (--kv-cost-per-token per estimated token), at most --kv-tokenize-max-wait; slower requests skip Tier 1.5")
	fl.DurationVar(&opts.KV.TokenizeMaxWait, "kv-tokenize-max-wait", opts.KV.TokenizeMaxWait, "KV-exact: the longest a long prompt waits for an engine's /tokenize")
	fl.IntVar(&opts.KV.WatchdogN, "kv-zero-hit-n", opts.KV.WatchdogN, "KV-exact: consecutive zero-hit lookups (while events flow) that log a parity warning")
	fl.DurationVar(&opts.KV.TRTPollInterval, "kv-trt-poll-interval", opts.KV.TRTPollInterval, "KV-exact: pause between TensorRT-LLM /kv_cache_events drains")
	fl.DurationVar(&opts.KV.PendingTTL, "kv-pending-ttl", opts.KV.PendingTTL, "KV-exact: the blocks a placement sends an endpoint count as held by it for this long, until its KV events show them (engines publish in batches: half a second late at the median, over a second under load); negative: only published blocks count")
	fl.DurationVar(&opts.KV.StaleAfter, "kv-stale-after", opts.KV.StaleAfter, "KV-exact: an endpoint sent work this long ago that published no KV event since is untrusted until its next event (its feed stopped with the socket up; negative disables)")
	// Engine signals: the engines' own queue and KV usage.
	fl.DurationVar(&opts.Engine.Interval, "engine-scrape-interval", opts.Engine.Interval, "pause between scrapes of each endpoint's engine metrics (queue, running batch, KV usage); negative turns scraping off")
	fl.DurationVar(&opts.Engine.Timeout, "engine-scrape-timeout", opts.Engine.Timeout, "bound on one engine metrics scrape (a port that hangs is given up after this)")
	fl.Float64Var(&opts.Engine.Jitter, "engine-scrape-jitter", opts.Engine.Jitter, "fraction of --engine-scrape-interval each pause varies by at random (0..0.5)")
	fl.Int64Var(&opts.Engine.MaxBytes, "engine-scrape-max-bytes", opts.Engine.MaxBytes, "largest engine metrics body taken; a larger one is ignored (too_large)")
	fl.DurationVar(&opts.Engine.StaleAfter, "engine-signal-stale-after", opts.Engine.StaleAfter, "an engine signal older than this (since its last good scrape) is ignored")
	fl.DurationVar(&opts.Engine.ModelsRefresh, "engine-models-refresh", opts.Engine.ModelsRefresh, "pause between reads of each endpoint's /v1/models max_model_len, on P/D rules that tokenise prompts without a configured max_model_len; negative turns the reads off")
	fl.BoolVar(&opts.Engine.LearnWindows, "engine-learn-windows", opts.Engine.LearnWindows, "give every endpoint without a configured admission_window (never a P/D prefill) a window sized from the batch limit its engine reports (SGLang /server_info, vLLM dev-mode /server_info, llm-d-inference-sim /admin/config, TensorRT-LLM trtllm_max_num_active_requests), read with the max_model_len reads every --engine-models-refresh")
	fl.Float64Var(&opts.Engine.WindowShare, "engine-window-share", opts.Engine.WindowShare, "fraction (0..1] of an engine's learned batch limit this gateway takes as its window, rounded up; 1/R with R gateway replicas in front of the same engines")
	// Flow control: the gateway queue of rules with an admission_window (docs/flow-control.md).
	fl.IntVar(&opts.Flow.QueueLength, "flow-queue-length", opts.Flow.QueueLength, "requests that may wait in one rule's gateway queue when every endpoint is at its admission_window; more are shed (503 worker_overload_protection_shed, Retry-After) lowest class first (0: never queue)")
	fl.DurationVar(&opts.Flow.MaxWait, "flow-max-wait", opts.Flow.MaxWait, "longest a request waits in the gateway queue before it is shed (0: never queue)")
	fl.Float64Var(&opts.Flow.MinShare, "flow-min-share", opts.Flow.MinShare, "fraction of dispatches each priority class below the top is guaranteed while it has requests queued (0..0.5), so no class starves")
	fl.DurationVar(&opts.Flow.MaxDeadline, "flow-max-slo-ttft", opts.Flow.MaxDeadline, "cap on a request's x-slo-ttft-ms deadline (larger values are taken as this; 0 ignores the header)")
	fl.StringVar(&opts.Flow.UnkeyedCeiling, "flow-unkeyed-max-class", opts.Flow.UnkeyedCeiling, "highest priority class (low, standard, high) a request without an API key may ask for with x-request-priority / x-gateway-inference-objective")
	fl.StringVar(&opts.Flow.KeyCeiling, "flow-key-max-class", opts.Flow.KeyCeiling, "highest priority class a request may ask for with an API key that sets no max_priority")
	// KV-exact interop and the in-process tokenizer.
	fl.DurationVar(&opts.KV.BindLiveWindow, "kv-bind-live-window", opts.KV.BindLiveWindow, "KV-exact, --kv-bind-addr: an endpoint rank is reported connected while its last KV event is this recent (trust does not need recent events)")
	fl.StringArrayVar(&kvTokenizers, "kv-tokenizer", nil, "KV-exact: tokenise in process with a Hugging Face tokenizer (byte-level BPE: Llama 3, Qwen 2/3, GPT-style): MODEL=PATH or PATH for any model; PATH is a directory with tokenizer.json[.gz] (+ tokenizer_config.json for chat) or a tokenizer.json; repeatable. Other requests ask the engine's /tokenize")
	fl.BoolVar(&opts.KV.LegacyLoadGuard, "kv-legacy-load-guard", opts.KV.LegacyLoadGuard, "every routing guard (KV-exact, P/D prefix and rendezvous) and the load choice compare in-flight counts (--kv-single-load-guard, pd_balance_abs_threshold, least connections) instead of the estimated time to first token")
	fl.DurationVar(&opts.KV.Cost.PerToken, "kv-cost-per-token", opts.KV.Cost.PerToken, "cost estimate (every routing rung): prefill time per prompt token the engine does not hold")
	fl.DurationVar(&opts.KV.Cost.Overhead, "kv-cost-overhead", opts.KV.Cost.Overhead, "cost estimate (every routing rung): fixed cost of starting a prefill")
	fl.DurationVar(&opts.KV.Cost.PerRequest, "kv-cost-per-request", opts.KV.Cost.PerRequest, "cost estimate (every routing rung): wait behind one request queued beyond the engine's batch (a running one costs this / --kv-cost-window)")
	fl.IntVar(&opts.KV.Cost.Window, "kv-cost-window", opts.KV.Cost.Window, "cost estimate (every routing rung): requests an engine runs at once (max-num-seqs); in-flight beyond it count as queued")
	fl.DurationVar(&opts.KV.Cost.Saturation, "kv-cost-saturation", opts.KV.Cost.Saturation, "cost estimate (every routing rung): penalty of an engine whose KV cache is full (none up to 80 % in use, linear above; negative disables)")
	fl.Float64Var(&opts.KV.Cost.BatchSlowdown, "kv-cost-batch-slowdown", opts.KV.Cost.BatchSlowdown, "cost estimate (every routing rung): how much longer a prefill takes beside a full running batch (--kv-cost-window) than on an idle engine, linear in between (1: twice as long; negative: none)")
	fl.Float64Var(&opts.KV.Cost.LearnRate, "kv-cost-learn-rate", opts.KV.Cost.LearnRate, "cost estimate (every routing rung): weight of each observed time to first token in an endpoint's learned per-token and per-request costs and its backlog share (EWMA; negative disables learning)")
	fl.IntVar(&opts.KV.SingleLoadGuard, "kv-single-load-guard", opts.KV.SingleLoadGuard, "KV-exact single pools (kvExactMode 3): skip a cache winner loaded this much above the least loaded (negative disables)")
	fl.Int64Var(&opts.PrefixIndex.BudgetBytes, "prefix-index-budget-bytes", opts.PrefixIndex.BudgetBytes, "prefix affinity (pd_cache_aware_mode): memory budget of each rule's prefix index; least recently used prefixes are evicted above it")
	fl.IntVar(&opts.PrefixIndex.MaxKeyBytes, "prefix-key-max-bytes", opts.PrefixIndex.MaxKeyBytes, "prefix affinity: bytes of each prompt that are keyed and matched (longer prompts are keyed on their head)")

	// --- management API access control (api/auth; README "Management API access") ---
	fl.StringVar(&opts.Auth.TokenFile, "api-token-file", opts.Auth.TokenFile, "management API bearer tokens, one per line as rw:<token> or ro:<token> (reloaded on SIGHUP and on change); without it the API must listen on loopback")
	fl.StringSliceVar(&opts.Auth.AllowedHosts, "api-allowed-host", opts.Auth.AllowedHosts, "extra Host the management API answers to: a DNS name, *.domain or an IP literal (repeatable); loopback, the listen address and localhost always work")
	fl.BoolVar(&opts.Auth.OpenMetrics, "api-open-metrics", opts.Auth.OpenMetrics, "serve /metrics without a token even when --api-token-file is set")
	fl.BoolVar(&opts.Auth.Insecure, "insecure-api", opts.Auth.Insecure, "allow a non-loopback --api-addr without --api-token-file (anyone who reaches it can change rules)")
	fl.DurationVar(&opts.Auth.ReloadInterval, "api-token-reload-interval", opts.Auth.ReloadInterval, "how often the token file is checked for changes (0 disables; SIGHUP always reloads)")
	// Edge hardening.
	fl.IntVar(&opts.Admission.MaxConns, "max-client-conns", opts.Admission.MaxConns, "cap on open client connections over all VIPs; new ones above it are closed at accept (default derived from RLIMIT_NOFILE: (limit - 1024) / 2; 0: no cap)")
	fl.IntVar(&opts.Admission.MaxConnsPerIP, "max-conns-per-ip", opts.Admission.MaxConnsPerIP, "cap on open client connections from one source address over all VIPs (0: no cap)")
	fl.DurationVar(&opts.Admission.IdleTimeout, "client-idle-timeout", opts.Admission.IdleTimeout, "close a keep-alive client connection idle this long between requests")
	fl.DurationVar(&opts.Admission.EvictIdleAfter, "evict-idle-after", opts.Admission.EvictIdleAfter, "at --max-client-conns, a new connection closes the longest-idle one (no request in progress) if it has been idle this long, instead of being refused (0: refuse)")
	fl.IntVar(&opts.Upstream.MaxConnsPerEndpoint, "max-engine-conns-per-endpoint", opts.Upstream.MaxConnsPerEndpoint, "cap on connections open to one engine address; requests above it wait for a free one (until the client gives up) instead of dialing (0: no cap)")
	fl.IntVar(&opts.Admission.MaxRequests, "max-inflight-requests", opts.Admission.MaxRequests, "cap on client requests in flight over all VIPs, each HTTP/2 stream counting (0: same as --max-client-conns; negative: no cap); above it requests get 503 too_many_requests_in_flight")
	fl.IntVar(&opts.Admission.MaxRequestsPerIP, "max-inflight-requests-per-ip", opts.Admission.MaxRequestsPerIP, "cap on client requests in flight from one source address, HTTP/2 streams included (0: same as --max-conns-per-ip; negative: no cap); above it 429")
	fl.IntVar(&opts.Admission.MaxStreamsPerConn, "max-streams-per-conn", opts.Admission.MaxStreamsPerConn, "HTTP/2 concurrent streams a client connection may open (SETTINGS_MAX_CONCURRENT_STREAMS; 0: net/http's 250)")
	fl.Int64Var(&opts.Bodies.MaxInFlightBytes, "max-body-bytes-in-flight", opts.Bodies.MaxInFlightBytes, "memory all request bodies being read or served may hold; above it requests get 503 overloaded with Retry-After (0: no bound)")
	fl.IntVar(&opts.PDBuffers.MaxBytes, "pd-buffer-pool-bytes", opts.PDBuffers.MaxBytes, "memory the P/D rules together keep between requests in prompt-sized buffers (leg bodies, prompt keys) so that agent-sized prompts do not allocate them afresh (0: the default)")
	fl.Int64Var(&opts.GC.Bytes, "gc-heap-floor", opts.GC.Bytes, "least garbage (bytes) the heap may gather between two garbage collections while the live heap is small: fewer collections per request for a little more memory; never lowers GOGC, and GOMEMLIMIT still applies (0: GOGC alone)")
	fl.BoolVar(&opts.AllowUnspecifiedVIP, "allow-unspecified-vip", opts.AllowUnspecifiedVIP, "accept rules whose externalIP is 0.0.0.0 or :: (listen on every interface)")
	fl.BoolVar(&opts.TrustForwardedFor, "trust-forwarded-for", opts.TrustForwardedFor, "keep clients' X-Forwarded-For (append the client to it) instead of replacing it; only behind a proxy that sets it")
	fl.BoolVar(&opts.Upstream.RelayLoops, "sse-relay-loops", opts.Upstream.RelayLoops, "relay SSE streams of the lean front end from an epoll loop per CPU (no wake-up of each stream's goroutine per event); false: each stream's goroutine waits for its engine")
	fl.StringVar(&opts.HTTPFrontEnd, "http-frontend", opts.HTTPFrontEnd, "HTTP server of plaintext VIPs: lean (strict RFC 9112 HTTP/1.1, less CPU and memory per request) or net/http; TLS VIPs always use net/http (HTTP/2 by ALPN)")
	// Engine silence bounds.
	fl.DurationVar(&opts.FirstByteTimeout, "first-byte-timeout", opts.FirstByteTimeout, "single pools: longest wait for an engine's response headers (504 upstream_timeout); a rule's inactiveTimeOut only caps it")
	fl.DurationVar(&opts.BodyStallTimeout, "body-stall-timeout", opts.BodyStallTimeout, "longest engine silence inside a non-streaming response body (the response is cut); a rule's inactiveTimeOut only caps it")
	fl.DurationVar(&opts.StreamIdleTimeout, "stream-idle-timeout", opts.StreamIdleTimeout, "longest engine silence inside an SSE stream; a rule's inactiveTimeOut only caps it")
	addStoreFlags(fl, &opts)
	addEPPFlags(fl, &opts)
	addSourceFlags(fl, &sources)
	return cmd
}
