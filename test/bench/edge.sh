#!/usr/bin/env bash
# Edge hardening figures (issue 10), on loopback, against the built binary:
#   1. 15,000 idle connections from one address (127.0.0.2) while a good
#      client (127.0.0.3) sends POSTs and an operator polls the API;
#   2. the same flood spread over 15 addresses (127.0.0.10-24), plus
#      slowloris connections;
#   3. RSS of the gateway under 1,000 headers-only 32 MiB connections and
#      after they close.
# The gateway runs with `ulimit -n $GW_NOFILE` (12000 by default, below the
# flood, so fd exhaustion is what is tested); the driver raises its own
# limit to the hard maximum. BASELINE_ROOT=/path/to/other/checkout runs the
# same phases against that tree's gateway too (bodies phase with
# BASELINE_BODIES connections, 300 by default: older trees allocate the
# declared size). Everything started here is killed on exit.
#
# Env: GW_NOFILE (12000) FLOOD (15000) SLOW (500) DURATION (10s)
#      BODIES (1000) BASE_PORT (18100) BASELINE_ROOT BASELINE_BODIES (300)
set -euo pipefail

GW_NOFILE=${GW_NOFILE:-12000}
FLOOD=${FLOOD:-15000}
SLOW=${SLOW:-500}
DURATION=${DURATION:-10s}
BODIES=${BODIES:-1000}
BASELINE_BODIES=${BASELINE_BODIES:-300}
BASE_PORT=${BASE_PORT:-18100}
ENGINE=127.0.0.1:$BASE_PORT
VIP=127.0.0.1:$((BASE_PORT + 1))
API=127.0.0.1:$((BASE_PORT + 2))
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=/usr/local/go/bin:$PATH

TMP=$(mktemp -d)
PIDS=()
GW_PID=
cleanup() {
  for p in "${PIDS[@]}" $GW_PID; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

echo "building..."
(cd "$ROOT" && go build -o "$TMP/infergate" ./cmd/infergate \
  && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine \
  && go build -o "$TMP/edge" ./test/bench/edge)
if [[ -n ${BASELINE_ROOT:-} ]]; then
  mkdir -p "$TMP/base"
  (cd "$BASELINE_ROOT" && go build -o "$TMP/base/infergate" ./cmd/infergate)
fi

"$TMP/fakeengine" -addr "$ENGINE" -no-log >"$TMP/engine.log" 2>&1 &
PIDS+=($!)

cat >"$TMP/rule.yaml" <<YAML
apiVersion: infergate/v1
kind: Loadbalancer
metadata:
  name: edge
spec:
  serviceArguments: {externalIP: ${VIP%:*}, port: ${VIP#*:}, protocol: tcp, sel: 0, mode: 4, probetype: http, probereq: /health}
  endpoints:
    - {endpointIP: ${ENGINE%:*}, targetPort: ${ENGINE#*:}, weight: 1}
YAML

wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "edge.sh: $1 did not come up" >&2; cat "$TMP"/*.log >&2 || true; exit 1
}

# start BIN NAME → starts a fresh gateway (new state dir), sets GW_PID.
start() {
  rm -rf "$TMP/$2.state"
  (ulimit -n "$GW_NOFILE"; exec "$1" serve --api-addr "$API" --state-dir "$TMP/$2.state" \
    --rules "$TMP/rule.yaml" --log-level error) >"$TMP/$2.log" 2>&1 &
  GW_PID=$!
  wait_port "$API"; wait_port "$VIP"
  sleep 3 # probes bring the endpoint up
}
stop() { kill "$GW_PID" 2>/dev/null || true; wait "$GW_PID" 2>/dev/null || true; GW_PID=; sleep 1; }

drive() { (ulimit -n "$(ulimit -Hn)"; exec "$TMP/edge" "$@"); }

SEVERAL=$(seq -s, -f '127.0.0.%g' 10 24)

# phases BIN NAME BODIES
phases() {
  echo; echo "=== $2: gateway with ulimit -n $GW_NOFILE ==="
  start "$1" "$2"
  echo "--- one address"
  drive -mode flood -vip "$VIP" -api "$API" -flood "$FLOOD" -flood-src 127.0.0.2 -duration "$DURATION" || true
  stop
  start "$1" "$2"
  echo "--- 15 addresses + $SLOW slowloris"
  drive -mode flood -vip "$VIP" -api "$API" -flood "$FLOOD" -slow "$SLOW" -flood-src "$SEVERAL" -duration "$DURATION" || true
  stop
  start "$1" "$2"
  echo "--- headers-only bodies"
  drive -mode bodies -vip "$VIP" -bodies "$3" -pid "$GW_PID" || true
  if ! kill -0 "$GW_PID" 2>/dev/null; then echo "gateway died (see $2.log)"; tail -3 "$TMP/$2.log"; fi
  stop
}

phases "$TMP/infergate" "this-tree" "$BODIES"
if [[ -n ${BASELINE_ROOT:-} ]]; then
  phases "$TMP/base/infergate" "baseline" "$BASELINE_BODIES"
fi
