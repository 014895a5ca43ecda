#!/usr/bin/env bash
# Proxy load comparison on loopback: wrk against (a) the fake engine directly,
# (b) infergate (`infergate serve` with one rule from a YAML file) in front of
# it, (c) Debian's nginx in front of it (plain proxy_pass with upstream
# keepalive). Prints req/s, p50, p99, CPU per request and the ratios b/a and
# b/c. Everything started here is killed on exit.
#
# Env: DURATION (10s) CONNS (64) THREADS (2) BASE_PORT (18000)
#      GATEWAY_BIN=dpserve runs the bare datapath (test/bench/dpserve) instead
#      of the daemon, e.g. for CPU profiles (-cpuprofile).
#      BASELINE_ROOT=/path/to/other/checkout also runs that tree's gateway
#      (e.g. `git archive <rev> | tar -x -C /tmp/base`) as (d) in the same
#      run and prints this tree's numbers as ratios against it.
set -euo pipefail

DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
BASE_PORT=${BASE_PORT:-18000}
ENGINE=127.0.0.1:$BASE_PORT
GATEWAY=127.0.0.1:$((BASE_PORT + 1))
NGINX=127.0.0.1:$((BASE_PORT + 2))
BASELINE=127.0.0.1:$((BASE_PORT + 4))
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=/usr/local/go/bin:/usr/sbin:$PATH

for bin in wrk nginx go; do
  command -v "$bin" >/dev/null || { echo "proxy.sh: $bin not found" >&2; exit 1; }
done

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ -f $TMP/nginx.pid ]]; then kill "$(cat "$TMP/nginx.pid" 2>/dev/null)" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

echo "building fake engine and infergate..."
(cd "$ROOT" && go build -o "$TMP/fakeengine" ./test/fakeengine/cmd/fakeengine \
  && go build -o "$TMP/dpserve" ./test/bench/dpserve \
  && go build -o "$TMP/infergate" ./cmd/infergate)

if [[ -n ${BASELINE_ROOT:-} ]]; then
  mkdir -p "$TMP/base"
  (cd "$BASELINE_ROOT" && go build -o "$TMP/base/dpserve" ./test/bench/dpserve \
    && go build -o "$TMP/base/infergate" ./cmd/infergate)
fi

"$TMP/fakeengine" -addr "$ENGINE" -no-log >"$TMP/engine.log" 2>&1 &
ENGINE_PID=$!
PIDS+=($ENGINE_PID)

# start_gateway BINDIR ADDR API_PORT NAME → starts a gateway, sets GW_PID.
start_gateway() {
  if [[ ${GATEWAY_BIN:-infergate} == dpserve ]]; then
    "$1/dpserve" -listen "$2" -engine "$ENGINE" >"$TMP/$4.log" 2>&1 &
  else
    cat >"$TMP/$4.yaml" <<YAML
apiVersion: infergate/v1
kind: Loadbalancer
metadata:
  name: bench
spec:
  serviceArguments: {externalIP: ${2%:*}, port: ${2#*:}, protocol: tcp, sel: 0, mode: 4}
  endpoints:
    - {endpointIP: ${ENGINE%:*}, targetPort: ${ENGINE#*:}, weight: 1}
YAML
    "$1/infergate" serve --api-addr "127.0.0.1:$3" --state-dir "$TMP/$4.state" \
      --rules "$TMP/$4.yaml" --log-level warn >"$TMP/$4.log" 2>&1 &
  fi
  GW_PID=$!
  PIDS+=($GW_PID)
}
start_gateway "$TMP" "$GATEWAY" $((BASE_PORT + 3)) gateway
DP_PID=$GW_PID
if [[ -n ${BASELINE_ROOT:-} ]]; then
  start_gateway "$TMP/base" "$BASELINE" $((BASE_PORT + 5)) baseline
  BASE_PID=$GW_PID
fi

mkdir -p "$TMP/logs"
cat >"$TMP/nginx.conf" <<CONF
worker_processes auto;
pid $TMP/nginx.pid;
error_log $TMP/logs/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $TMP/body;
  proxy_temp_path $TMP/proxy;
  fastcgi_temp_path $TMP/fastcgi;
  uwsgi_temp_path $TMP/uwsgi;
  scgi_temp_path $TMP/scgi;
  upstream engine { server $ENGINE; keepalive 128; }
  server {
    listen $NGINX;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
CONF
nginx -c "$TMP/nginx.conf" -p "$TMP" >"$TMP/nginx.out" 2>&1 &
NGINX_PID=$!
PIDS+=($NGINX_PID)

wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "proxy.sh: $1 did not come up" >&2; cat "$TMP"/*.log "$TMP/nginx.out" >&2 || true; exit 1
}
wait_port "$ENGINE"; wait_port "$GATEWAY"; wait_port "$NGINX"
if [[ -n ${BASELINE_ROOT:-} ]]; then wait_port "$BASELINE"; fi

cat >"$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"fake-model","prompt":"hello","max_tokens":4}'
wrk.headers["Content-Type"] = "application/json"
LUA

# cputicks PID... → user+system clock ticks of the processes and their
# children threads/workers (nginx workers are children of the master).
cputicks() {
  local t=0 p
  for p in "$@" $(pgrep -P "$1" 2>/dev/null || true); do
    [[ -r /proc/$p/stat ]] && t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat")))
  done
  echo "$t"
}

# run NAME ADDR [PID] → "rps p50_us p99_us non2xx cpu_us_per_req"
# CPU per request of the proxy process is the load-robust number: on a
# shared box, throughput and latency mostly measure the other tenants.
run() {
  wrk -c"$CONNS" -t"$THREADS" -d1s -s "$TMP/post.lua" "http://$2/v1/completions" >/dev/null # warm-up
  local c0=0 c1=0
  [[ -n ${3:-} ]] && c0=$(cputicks "$3")
  wrk -c"$CONNS" -t"$THREADS" -d"$DURATION" --latency -s "$TMP/post.lua" "http://$2/v1/completions" >"$TMP/$1.wrk"
  [[ -n ${3:-} ]] && c1=$(cputicks "$3")
  awk -v ticks=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" '
    function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return v*1000; if (v ~ /s$/) return v*1000000; return v }
    /Requests\/sec:/ { rps=$2 }
    / requests in / { n=$1 }
    /^ +50%/ { p50=us($2) }
    /^ +99%/ { p99=us($2) }
    /Non-2xx/ { bad=$NF }
    END { printf "%s %s %s %s %.1f\n", rps, p50, p99, (bad==""?0:bad), (n>0 ? ticks*1000000/hz/n : 0) }' "$TMP/$1.wrk"
}

# For "direct" the CPU column is the fake engine's own (a bare Go net/http
# server): the floor any net/http-based proxy pays once per side.
read -r A_RPS A_P50 A_P99 A_BAD A_CPU < <(run direct "$ENGINE" "$ENGINE_PID")
read -r B_RPS B_P50 B_P99 B_BAD B_CPU < <(run infergate "$GATEWAY" "$DP_PID")
read -r C_RPS C_P50 C_P99 C_BAD C_CPU < <(run nginx "$NGINX" "$NGINX_PID")
if [[ -n ${BASELINE_ROOT:-} ]]; then
  read -r D_RPS D_P50 D_P99 D_BAD D_CPU < <(run baseline "$BASELINE" "$BASE_PID")
fi

printf "\nwrk -c%s -t%s -d%s, POST /v1/completions, all on loopback\n" "$CONNS" "$THREADS" "$DURATION"
printf "%-10s %12s %10s %10s %8s %14s\n" target "req/s" "p50(us)" "p99(us)" non2xx "cpu/req"
printf "%-10s %12.0f %10.0f %10.0f %8s %12sus (engine)\n" "direct" "$A_RPS" "$A_P50" "$A_P99" "$A_BAD" "$A_CPU"
printf "%-10s %12.0f %10.0f %10.0f %8s %12sus\n" "infergate" "$B_RPS" "$B_P50" "$B_P99" "$B_BAD" "$B_CPU"
printf "%-10s %12.0f %10.0f %10.0f %8s %12sus\n" "nginx" "$C_RPS" "$C_P50" "$C_P99" "$C_BAD" "$C_CPU"
awk -v a="$A_RPS" -v b="$B_RPS" -v c="$C_RPS" -v ap="$A_P50" -v bp="$B_P50" -v cp="$C_P50" -v bc="$B_CPU" -v cc="$C_CPU" 'BEGIN {
  printf "\nthroughput infergate/direct = %.2fx, infergate/nginx = %.2fx\n", b/a, b/c
  printf "p50 added over direct: infergate %+.0f us, nginx %+.0f us\n", bp-ap, cp-ap
  if (cc > 0) printf "proxy CPU per request infergate/nginx = %.2fx\n", bc/cc }'
if [[ -n ${BASELINE_ROOT:-} ]]; then
  printf "%-10s %12.0f %10.0f %10.0f %8s %12sus (%s)\n" "baseline" "$D_RPS" "$D_P50" "$D_P99" "$D_BAD" "$D_CPU" "$BASELINE_ROOT"
  awk -v b="$B_RPS" -v d="$D_RPS" -v bc="$B_CPU" -v dc="$D_CPU" 'BEGIN {
    printf "infergate/baseline: throughput %.2fx, proxy CPU per request %.2fx\n", b/d, bc/dc }'
fi
