#!/usr/bin/env bash
# SSE relay cost of two infergate builds and nginx, in alternating order
# (A B N, then N B A, ...): ssebench's CPU per relayed event and RSS per
# open stream for each, every gateway a fresh process per run, all in
# front of one ticking fake engine. Order effects on a shared box (the
# first and the last of a run measure differently) cancel over a pair of
# rounds; the ratios printed are of the means.
#
# Usage: abba.sh NEW_BIN BASE_BIN [ROUNDS]
# Env: IP (127.0.0.1) PORT0 (19000) STREAMS (1000) TOKENS (100) DELAY (20ms)
#      WARM=1 runs each gateway's streams once unmeasured first (as
#      test/bench/proxy.sh measures after its wrk phase: the heap has grown
#      once, so RSS per stream counts less of the runtime's own growth).
#      STRACE=1 also counts the gateways' system calls per event (one
#      run each, strace -c -f; slows them, so no CPU figure from it).
set -euo pipefail
NEW=$1 BASE=$2 ROUNDS=${3:-2}
IP=${IP:-127.0.0.1} PORT0=${PORT0:-19000}
STREAMS=${STREAMS:-1000} TOKENS=${TOKENS:-100} DELAY=${DELAY:-20ms}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=../nginxconf.sh
. "$ROOT/test/bench/nginxconf.sh"
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
export PATH=/usr/local/go/bin:/usr/sbin:$PATH
(cd "$ROOT" && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine && go build -o "$TMP/ssebench" ./test/bench/ssebench)

ENGINE=$IP:$PORT0
"$TMP/fakeengine" -addr "$ENGINE" -no-log -tokens "$TOKENS" -token-delay "$DELAY" >"$TMP/engine.log" 2>&1 &
PIDS+=($!)
declare -A BIN=([new]=$NEW [base]=$BASE) OFF=([new]=10 [base]=20 [nginx]=30)
addr() { echo "$IP:$((PORT0 + ${OFF[$1]}))"; }

wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "abba.sh: $1 did not come up" >&2; exit 1
}

start() { # NAME → pid in SPID
  local a; a=$(addr "$1")
  if [[ $1 == nginx ]]; then
    mkdir -p "$TMP/nginx/logs"
    { nginx_conf_head "$TMP" 65536
      cat <<CONF
  upstream engine { server $ENGINE; keepalive 128; }
  server { listen $a; location / { proxy_pass http://engine; } }
}
CONF
    } >"$TMP/nginx.conf"
    nginx -c "$TMP/nginx.conf" -p "$TMP/nginx" >"$TMP/nginx.log" 2>&1 &
  else
    cat >"$TMP/$1.yaml" <<YAML
apiVersion: infergate/v1
kind: Loadbalancer
metadata:
  name: sse
spec:
  serviceArguments: {externalIP: ${a%:*}, port: ${a#*:}, protocol: tcp, sel: 0, mode: 4}
  endpoints:
    - {endpointIP: ${ENGINE%:*}, targetPort: ${ENGINE#*:}, weight: 1}
YAML
    rm -rf "$TMP/$1.state"
    "${BIN[$1]}" serve --api-addr "$IP:$((PORT0 + ${OFF[$1]} + 9))" --state-dir "$TMP/$1.state" \
      --rules "$TMP/$1.yaml" --log-level warn --max-conns-per-ip 0 --max-engine-conns-per-endpoint 0 >"$TMP/$1.log" 2>&1 &
  fi
  SPID=$!
  PIDS+=($SPID)
  wait_port "$a"
}

stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

wait_port "$ENGINE"
declare -A CPU USR RSS ANON
run() { # NAME
  start "$1"
  local out
  if [[ ${WARM:-0} == 1 ]]; then
    "$TMP/ssebench" -label warm -url "http://$(addr "$1")/v1/completions" -streams "$STREAMS" -timeout 2m >/dev/null 2>&1 || true
  fi
  out=$("$TMP/ssebench" -label "$1" -url "http://$(addr "$1")/v1/completions" -streams "$STREAMS" -pid "$SPID" -timeout 2m 2>&1 || true)
  stop "$SPID"
  echo "  load $(cut -d' ' -f1-3 /proc/loadavg)  $out"
  local c u r a
  c=$(grep -o 'cpu_us_per_event=[0-9.]*' <<<"$out" | cut -d= -f2 || true)
  u=$(grep -o 'user_us_per_event=[0-9.]*' <<<"$out" | cut -d= -f2 || true)
  r=$(grep -o 'rss_kb_per_stream=[-0-9.]*' <<<"$out" | cut -d= -f2 || true)
  a=$(grep -o 'anon_kb_per_stream=[-0-9.]*' <<<"$out" | cut -d= -f2 || true)
  CPU[$1]="${CPU[$1]:-} $c" USR[$1]="${USR[$1]:-} $u" RSS[$1]="${RSS[$1]:-} $r" ANON[$1]="${ANON[$1]:-} $a"
}

for ((k = 1; k <= ROUNDS; k++)); do
  if ((k % 2)); then order="new base nginx"; else order="nginx base new"; fi
  echo "round $k: $order"
  for t in $order; do run "$t"; done
done

mean() { awk '{s=0; for(i=1;i<=NF;i++) s+=$i; printf "%.2f", (NF ? s/NF : 0)}' <<<"$1"; }
echo
for t in new base nginx; do
  printf "%-6s cpu/event us:%s (mean %s)  user:%s (mean %s)  rss KB/stream:%s (mean %s)  anon KB/stream:%s (mean %s)\n" "$t" "${CPU[$t]}" "$(mean "${CPU[$t]}")" "${USR[$t]}" "$(mean "${USR[$t]}")" \
    "${RSS[$t]}" "$(mean "${RSS[$t]}")" "${ANON[$t]}" "$(mean "${ANON[$t]}")"
done
awk -v n="$(mean "${CPU[new]}")" -v b="$(mean "${CPU[base]}")" -v x="$(mean "${CPU[nginx]}")" \
  'BEGIN { printf "cpu per event: new/nginx %.2fx, base/nginx %.2fx, new/base %.2fx\n", n/x, b/x, n/b }'
awk -v n="$(mean "${USR[new]}")" -v b="$(mean "${USR[base]}")" -v x="$(mean "${USR[nginx]}")" \
  'BEGIN { if (x > 0 && b > 0) printf "user cpu per event: new/nginx %.2fx, base/nginx %.2fx, new/base %.2fx\n", n/x, b/x, n/b }'

if [[ ${STRACE:-0} == 1 ]]; then
  echo
  for t in new base nginx; do
    start "$t"
    pids=$SPID
    [[ $t == nginx ]] && pids="$SPID $(cat /proc/$SPID/task/$SPID/children 2>/dev/null || true)"
    args=(); for p in $pids; do args+=(-p "$p"); done
    strace -c -f "${args[@]}" -o "$TMP/$t.strace" &
    SP=$!
    sleep 0.5
    out=$("$TMP/ssebench" -label "$t" -url "http://$(addr "$t")/v1/completions" -streams 200 -timeout 2m 2>&1 || true)
    kill -INT "$SP"; wait "$SP" 2>/dev/null || true
    stop "$SPID"
    ev=$(grep -o 'events=[0-9]*' <<<"$out" | cut -d= -f2)
    echo "$t: $out"
    awk -v ev="$ev" '$NF ~ /^(read|recvfrom|write|writev|readv|sendto|epoll_wait|epoll_pwait|epoll_ctl|futex|nanosleep|getsockopt)$/ {
      printf "  %-12s %8.3f per event, errors %8.3f per event\n", $NF, $4/ev, (NF == 6 ? $5 : 0)/ev }' "$TMP/$t.strace"
  done
fi
