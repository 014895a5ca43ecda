// Package rules is what a rule is: the LoxiLB-compatible wire model, its
// strict decoding, validation and compilation into immutable spec.Rule
// objects.
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
//     counter, health, engineLoad, windowLoad) are accepted and dropped so a GET body can
//     be re-POSTed (SpecOnly clears them from a decoded rule). The
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
// # What a rule may become
//
// CheckUpdate (LoxiLB's existing-key rows) and CheckCollision (one served
// address, one rule) are the rules a rule set obeys; Prepare is validate +
// normalise + compile in one call. Where rules live — the store, its
// backends, persistence and migration — is package rules/store, which asks
// these under its lock.
package rules
