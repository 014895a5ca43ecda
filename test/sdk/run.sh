#!/usr/bin/env bash
# Runs sdk_check.mjs (the official OpenAI and Anthropic Node SDKs) against
# the built gateway: one single-pool rule over internal/fakeengine, one vLLM and
# one SGLang 1P1D rule over `infergate fake-engine`, all on loopback. Not
# part of CI: it needs `npm install --prefix "$SDK_DIR" openai
# @anthropic-ai/sdk` first (SDK_DIR defaults to test/sdk; node_modules is
# not checked in). Everything started here is killed on exit.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SDK_DIR=${SDK_DIR:-$ROOT/test/sdk}
BASE_PORT=${BASE_PORT:-18300}
export PATH=/usr/local/go/bin:$PATH
[[ -d $SDK_DIR/node_modules/openai ]] || { echo "run.sh: npm install --prefix $SDK_DIR openai @anthropic-ai/sdk" >&2; exit 1; }
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
(cd "$ROOT" && go build -o "$TMP/infergate" ./cmd/infergate && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine)
P=$BASE_PORT
"$TMP/fakeengine" -addr 127.0.0.81:$P >"$TMP/single.log" 2>&1 & PIDS+=($!)
"$TMP/infergate" fake-engine --dialect vllm --role prefill --addr 127.0.0.82:$P >"$TMP/vp.log" 2>&1 & PIDS+=($!)
"$TMP/infergate" fake-engine --dialect vllm --role decode --addr 127.0.0.83:$P --honor-max-tokens >"$TMP/vd.log" 2>&1 & PIDS+=($!)
"$TMP/infergate" fake-engine --dialect sglang --role prefill --addr 127.0.0.84:$P --bootstrap-port $((P + 1)) >"$TMP/sp.log" 2>&1 & PIDS+=($!)
"$TMP/infergate" fake-engine --dialect sglang --role decode --addr 127.0.0.85:$P >"$TMP/sd.log" 2>&1 & PIDS+=($!)
cat >"$TMP/rules.yaml" <<YAML
apiVersion: infergate/v1
kind: Loadbalancer
metadata: {name: sdk-single}
spec:
  serviceArguments: {externalIP: 127.0.0.80, port: $P, protocol: tcp, sel: 0, mode: 4}
  endpoints: [{endpointIP: 127.0.0.81, targetPort: $P, weight: 1}]
---
apiVersion: infergate/v1
kind: Loadbalancer
metadata: {name: sdk-vllm-pd}
spec:
  serviceArguments: {externalIP: 127.0.0.80, port: $((P + 2)), protocol: tcp, sel: 0, mode: 4, pd_disagg_mode: true, kvEngineType: vllm}
  endpoints:
    - {endpointIP: 127.0.0.82, targetPort: $P, weight: 1, ep_role: 1}
    - {endpointIP: 127.0.0.83, targetPort: $P, weight: 1, ep_role: 2}
---
apiVersion: infergate/v1
kind: Loadbalancer
metadata: {name: sdk-sglang-pd}
spec:
  serviceArguments: {externalIP: 127.0.0.80, port: $((P + 3)), protocol: tcp, sel: 0, mode: 4, pd_disagg_mode: true, kvEngineType: sglang, pdBootstrapPort: $((P + 1))}
  endpoints:
    - {endpointIP: 127.0.0.84, targetPort: $P, weight: 1, ep_role: 1}
    - {endpointIP: 127.0.0.85, targetPort: $P, weight: 1, ep_role: 2}
YAML
"$TMP/infergate" serve --api-addr 127.0.0.1:$((P + 4)) --state-dir "$TMP/state" --rules "$TMP/rules.yaml" --log-level warn >"$TMP/gw.log" 2>&1 & PIDS+=($!)
for port in $P $((P + 2)) $((P + 3)); do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.80/$port) 2>/dev/null && break; sleep 0.05; done
done
# ESM resolves packages next to the script: run a copy inside SDK_DIR.
SCRIPT=$SDK_DIR/sdk_check.mjs
[[ $SCRIPT -ef $ROOT/test/sdk/sdk_check.mjs ]] || { SCRIPT=$SDK_DIR/.infergate_sdk_check.mjs; cp "$ROOT/test/sdk/sdk_check.mjs" "$SCRIPT"; }
SINGLE_URL=http://127.0.0.80:$P VLLM_PD_URL=http://127.0.0.80:$((P + 2)) SGLANG_PD_URL=http://127.0.0.80:$((P + 3)) \
  node "$SCRIPT" || { cat "$TMP/gw.log" >&2; exit 1; }
