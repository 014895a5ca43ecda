#!/usr/bin/env bash
# Where a small request's user time goes, function by function
# (docs/performance.md, "Where a small request's CPU goes"): the built
# gateway in front of the fake engine under wrk -c64, sampled by
# `perf record -g`, each user-space sample charged to the nearest infergate
# function on its stack (perfuser.py), in microseconds per request.
#
#   test/bench/perfuser.sh [GATEWAY_BIN]     (default: builds ./cmd/infergate)
#
# Env: BIND (127.0.0.1) BASE_PORT (18300: the rule's port; the engine is
# +100, the API +9) DURATION (8s) TOP (40 rows) OUT (a temp prefix: OUT.data,
# OUT.stacks, OUT.wrk are kept). perf's sampling adds ~20 % to the totals:
# compare only builds profiled alike, alternated, over several runs. Needs
# perf, wrk and python3; counters are not needed (cpu-clock sampling).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=smallpost.sh
. "$ROOT/test/bench/smallpost.sh"
BIND=${BIND:-127.0.0.1}
BASE_PORT=${BASE_PORT:-18300}
DURATION=${DURATION:-8s}
TOP=${TOP:-40}
TMP=$(mktemp -d)
OUT=${OUT:-$TMP/perfuser}
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
for tool in perf wrk python3; do
  command -v "$tool" >/dev/null || { echo "perfuser.sh: $tool is missing" >&2; exit 2; }
done

(cd "$ROOT" && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine)
BIN=${1:-}
if [[ -z $BIN ]]; then
  (cd "$ROOT" && go build -o "$TMP/infergate" ./cmd/infergate)
  BIN=$TMP/infergate
fi
ENGINE=$BIND:$((BASE_PORT + 100))
one_rule_yaml perfuser "$BIND:$BASE_PORT" "$ENGINE" >"$TMP/rules.yaml"
small_post_lua >"$TMP/post.lua"
"$TMP/fakeengine" -addr "$ENGINE" -no-log >"$TMP/engine.log" 2>&1 &
PIDS+=($!)
"$BIN" serve --api-addr "$BIND:$((BASE_PORT + 9))" --state-dir "$TMP/state" --rules "$TMP/rules.yaml" \
  --log-level warn --max-conns-per-ip 0 --max-engine-conns-per-endpoint 0 >"$TMP/gateway.log" 2>&1 &
GW=$!
PIDS+=($GW)
URL=http://$BIND:$BASE_PORT/v1/completions
for _ in $(seq 50); do
  curl -fs -o /dev/null -X POST -d '{}' "$URL" 2>/dev/null && break
  sleep 0.1
done
wrk -c64 -t2 -d2s -s "$TMP/post.lua" "$URL" >/dev/null # warm-up
perf record -F 2000 -g -p "$GW" -o "$OUT.data" -- sleep "${DURATION%s}" >/dev/null 2>&1 &
PERF=$!
wrk -c64 -t2 -d"$DURATION" --latency -s "$TMP/post.lua" "$URL" >"$OUT.wrk"
wait "$PERF"
perf script -i "$OUT.data" -F ip,sym 2>/dev/null >"$OUT.stacks"
grep Requests/sec "$OUT.wrk"
python3 "$ROOT/test/bench/perfuser.py" "$OUT.stacks" "$TOP" "$(awk '/requests in/{print $1}' "$OUT.wrk")"
if [[ $OUT == "$TMP"/* ]]; then :; else echo "kept $OUT.data $OUT.stacks $OUT.wrk"; fi
