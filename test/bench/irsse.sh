#!/usr/bin/env bash
# User-space instructions per relayed SSE event, each proxy in front of the
# same ticking fake engine under the same ssebench load, counted by
# valgrind's callgrind: the SSE counterpart of irpr.sh (docs/performance.md,
# "The SSE relay's instructions per event, session 18").
#
# CPU time per event on this shared VM moves with the neighbours; the
# instructions a proxy executes per event do not. Each target runs alone
# under callgrind; one ssebench run (STREAMS streams of TOKENS events every
# DELAY) warms it up, the counters are zeroed (`callgrind_control -z`), a
# second run is measured, the counters are dumped, and the count divided by
# the events the clients received is one event's instructions: the stream's
# own setup (request, engine head, answer head) shared over its events, the
# scheduler and the collector included. It is not the issue's figure (CPU
# time, user + system, from /proc: proxy.sh's SSE part); it shows which way
# and how far a change moves the user part.
#
#   test/bench/irsse.sh                 (TARGETS: infergate nginx)
#
# Env: TARGETS ("infergate nginx"; also "baseline": infergate built from
#      BASELINE_ROOT, a source tree such as `git archive` of another commit)
#      BIND (127.0.0.1) BASE_PORT (18800) STREAMS (100) TOKENS (100)
#      DELAY (100ms: valgrind runs a proxy's threads one at a time, ~50×
#      slower; a proxy that falls behind the engine reads two events at
#      once and its count per event drops by a quarter, so the load is
#      kept to ~1,000 events a second) ROUNDS (1) STRACE (0; 1 also runs
#      each target once outside valgrind under `strace -c -f` for the
#      measured ssebench run and prints its system calls per event; the same
#      GOAMD64=v1 build and GODEBUG as under valgrind)
#      CGDIR (unset; a directory: each round's callgrind file is kept there
#      as TARGET.rROUND.cg, for callgrind_annotate)
# Go binaries are built with GOAMD64=v1 and run with
# GODEBUG=asyncpreemptoff=1, as in irpr.sh, and adaptivestackstart=0: each
# stream's connection goroutine then grows its stack from 2 KiB every time
# (~700 instructions an event), where the runtime's own choice follows its
# last collection's stacks and moved a run's count by that much; nginx
# runs one worker with master_process off, as in irpr.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGETS=${TARGETS:-"infergate nginx"}
BIND=${BIND:-127.0.0.1}
BASE_PORT=${BASE_PORT:-18800}
STREAMS=${STREAMS:-100}
TOKENS=${TOKENS:-100}
DELAY=${DELAY:-100ms}
ROUNDS=${ROUNDS:-1}
STRACE=${STRACE:-0}
export PATH=/usr/local/go/bin:/usr/sbin:$PATH
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
for tool in valgrind callgrind_control curl; do
  command -v "$tool" >/dev/null || { echo "irsse.sh: $tool is missing (apt-get install valgrind curl)" >&2; exit 2; }
done
((STRACE)) && { command -v strace >/dev/null || { echo "irsse.sh: strace is missing" >&2; exit 2; }; }
# shellcheck source=nginxconf.sh
. "$ROOT/test/bench/nginxconf.sh"
# shellcheck source=cgvs.sh
. "$ROOT/test/bench/cgvs.sh"
# shellcheck source=smallpost.sh
. "$ROOT/test/bench/smallpost.sh"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

ENGINE=$BIND:$((BASE_PORT + 100))
(cd "$ROOT" && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine \
  && go build -o "$TMP/ssebench" ./test/bench/ssebench)
for t in $TARGETS; do
  case $t in
    infergate) (cd "$ROOT" && GOAMD64=v1 go build -o "$TMP/infergate" ./cmd/infergate) ;;
    baseline)
      [[ -n ${BASELINE_ROOT:-} ]] || { echo "irsse.sh: baseline needs BASELINE_ROOT" >&2; exit 2; }
      (cd "$BASELINE_ROOT" && GOAMD64=v1 go build -o "$TMP/baseline" ./cmd/infergate) ;;
    nginx) command -v nginx >/dev/null || { echo "irsse.sh: nginx is missing" >&2; exit 2; } ;;
    *) echo "irsse.sh: unknown target $t" >&2; exit 2 ;;
  esac
done
"$TMP/fakeengine" -addr "$ENGINE" -no-log -tokens "$TOKENS" -token-delay "$DELAY" >"$TMP/engine.log" 2>&1 &
PIDS+=($!)

# start TARGET PORT [WRAP...] → the proxy's pid on stdout; it listens on
# BIND:PORT in front of ENGINE, run under WRAP (valgrind's command line, or
# nothing).
start() {
  local t=$1 port=$2
  shift 2
  case $t in
    infergate | baseline)
      one_rule_yaml irsse "$BIND:$port" "$ENGINE" >"$TMP/$t.yaml"
      rm -rf "$TMP/$t.state"
      GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off,adaptivestackstart=0 "$@" "$TMP/$t" serve --api-addr "$BIND:$((port + 9))" \
        --state-dir "$TMP/$t.state" --rules "$TMP/$t.yaml" --log-level warn \
        --max-conns-per-ip 0 --max-engine-conns-per-endpoint 0 >"$TMP/$t.log" 2>&1 &
      ;;
    nginx)
      mkdir -p "$TMP/nginx/logs"
      {
        nginx_conf_head "$TMP" 65536
        echo "  upstream engine { server $ENGINE; keepalive 128; }"
        echo "  server { listen $BIND:$port; location / { proxy_pass http://engine; } }"
        echo "}"
      } | sed 's/^worker_processes auto;/worker_processes 1;\nmaster_process off;/' >"$TMP/nginx.conf"
      "$@" nginx -c "$TMP/nginx.conf" -p "$TMP/nginx" >"$TMP/$t.log" 2>&1 &
      ;;
  esac
  echo $!
}

# ready URL PID: up to 30 s for the proxy to answer (it starts under valgrind).
ready() {
  for _ in $(seq 1 150); do
    if curl -fs -m 2 -o /dev/null -X POST -H 'Content-Type: application/json' \
      -d '{"model":"fake-model","prompt":"hi","max_tokens":4}' "$1"; then return 0; fi
    sleep 0.2
  done
  echo "irsse.sh: no answer on $1" >&2; cat "$TMP"/*.log >&2; exit 1
}

# sse URL → the events the run's clients received (ssebench's events=).
sse() {
  local out
  out=$("$TMP/ssebench" -url "$1" -streams "$STREAMS" -batch 100 -timeout 5m)
  grep -q ' errors=0 ' <<<"$out" || { echo "irsse.sh: ssebench failed: $out" >&2; exit 1; }
  sed -n 's/.* events=\([0-9]*\) .*/\1/p' <<<"$out"
}

printf '%-10s %5s %9s %14s %10s\n' target round events instructions Ir/event
declare -A SUM
port=$BASE_PORT
for ((r = 0; r < ROUNDS; r++)); do
  for t in $TARGETS; do
    port=$((port + 10))
    cg=$TMP/$t.cg
    pid=$(start "$t" $port valgrind --tool=callgrind --callgrind-out-file="$cg")
    PIDS+=("$pid")
    url=http://$BIND:$port/v1/completions
    ready "$url"
    sse "$url" >/dev/null
    rm -f "$cg".*
    callgrind_control -z "$pid" >/dev/null 2>&1
    n=$(sse "$url")
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    ir=$(awk '/^totals:/{print $2}' "$cg".* | head -1)
    [[ -n ${CGDIR:-} ]] && mkdir -p "$CGDIR" && cat "$cg".* >"$CGDIR/$t.r$r.cg"
    per=$((ir / n))
    SUM[$t]=$((${SUM[$t]:-0} + per))
    printf '%-10s %5d %9d %14d %10d\n' "$t" "$r" "$n" "$ir" "$per"
  done
done
echo
echo "user-space instructions per relayed event, mean of $ROUNDS round(s) ($STREAMS streams × $TOKENS events every $DELAY under callgrind)"
for t in $TARGETS; do
  mean=$((SUM[$t] / ROUNDS))
  vs=$(cg_vs SUM "$t")
  printf '%-10s %8d Ir/event%s\n' "$t" "$mean" "$vs"
done

((STRACE)) || exit 0
echo
echo "system calls per relayed event (strace -c -f over one measured run, outside valgrind)"
for t in $TARGETS; do
  port=$((port + 10))
  pid=$(start "$t" $port)
  PIDS+=("$pid")
  url=http://$BIND:$port/v1/completions
  ready "$url"
  sse "$url" >/dev/null
  strace -c -f -q -o "$TMP/$t.strace" -p "$pid" &
  spid=$!
  sleep 1
  n=$(sse "$url")
  kill -INT "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "$t ($n events):"
  awk -v n="$n" '$1 ~ /^[0-9.]+$/ && $NF ~ /^[a-z_0-9]+$/ && $NF != "total" { printf "  %-16s %8.3f\n", $NF, $4 / n }' "$TMP/$t.strace"
done
