// Package rules turns LoxiLB-compatible load-balancer rule bodies into
// compiled, immutable datapath rules, and owns the rule set.
//
// # Pipeline: decode → default → validate → compile
//
//   - DecodeJSON is strict where encoding/json is lenient: every object key is
//     checked against the wire model's json tags (derived by reflection, so the
//     check cannot drift from model.go). Keys match in any letter case, as in
//     LoxiLB (loxicmd sends "BGP"/"Monitor"); one field under two casings is
//     a duplicate. Keys that are no field in any case are 400 unknown_field
//     with the full path and a suggestion (`kv_exact_mode` → `kvExactMode`);
//     LoxiLB fields infergate does not serve are 400 unsupported saying why
//     (loxilb_fields.go); wrong JSON types and duplicate keys are 400
//     malformed_json naming the field; output-only keys (status, state,
//     counter, health) are accepted and dropped so a GET body can be re-POSTed. The
//     walk fills the struct itself (one pass; a differential fuzz test keeps
//     it equal to encoding/json on every accepted body).
//   - Validate runs the field pass (go-playground/validator map rules kept in
//     validate.go, so the wire model carries no validation tags) and then one
//     ordered cross-field pass (crossChecks in cross.go): LoxiLB's own checks
//     first, in LoxiLB's order with LoxiLB's exact result text, then
//     infergate's restrictions (mode 4 and tcp only, classic L4 knobs
//     unsupported, sel 8/10 single-pool only, …). Status codes are honest:
//     400 for bad input, 409 for conflicts, 404 for missing — never 500.
//   - Compile resolves every "0 means default" field. LoxiLB's effective
//     defaults: kvZmqPort 5557, kvBlockSize 16 (for every engine, TRT-LLM
//     included: the subscriber learns the real block size from events, and
//     TRT-LLM admission checks it per endpoint), kvDpRankCount 1,
//     pd_cache_threshold 20, pd_balance_abs_threshold 3, pd_session_ttl_sec
//     300 s, pdBootstrapPort 8998 (SGLang P/D only), nixl_port = targetPort
//     (vLLM only), kvHashAlgo from the engine (vllm sha256_cbor, sglang
//     sha256_sglang, trtllm blockhash_trtllm), engine "" = vllm,
//     inactiveTimeOut 240 s. Choices LoxiLB leaves open: probeTimeout 2 s,
//     probeRetries 2, probetype "" = none (tcp when monitor is set), http(s)
//     probe path /health, probe port 0 = the endpoint's own port. P/D rules
//     always get the circuit breaker. Endpoints keep request order (LoxiLB
//     sorts by IP); an endpoint's ID is "ip:port" (IPv6 bracketed).
//
// # Store: atomic, durable upsert
//
// Apply is LoxiLB's upsert keyed by (VIP, port, protocol, block, host,
// path_prefix, path_match_mode, model_name): a new key is created, a changed
// one updated in place (ep_role/nixl_port included), and a body that means the
// same as the stored one (defaults resolved) is 409 rule_exists. Each
// mutation holds one mutex across decide → Runtime.Install/Remove → durable
// persist → publish: if Install fails nothing changed; if persisting fails the
// runtime is rolled back and the caller gets 500 persist_failed. Reads never
// wait on a mutation: they see an immutable snapshot published after each
// commit.
//
// The whole rule set is written after every change to <StateDir>/rules.json
// ({"schema_version":1,"rules":[…],"checksum":"sha256:…"}, mode 0600) via a
// temp file, fsync, rename and directory fsync, so an acknowledged change
// survives a crash. Replay feeds each persisted rule through the same
// decode/validate/compile/Install path; until it finishes every write is 503
// not_ready. A corrupt file is renamed rules.json.corrupt-<ts> and boot
// continues empty; rules that no longer validate (or that the datapath still
// refuses after a few bounded retries) are skipped, saved to
// rules.json.rejected-<ts> with the reason, and the set is rewritten without
// them. Stale temp files from a crash mid-write are removed at open.
package rules
