#!/usr/bin/env bash
# User-space instructions per proxied request, each proxy under the same
# wrk load in front of the same fake engine, counted by valgrind's
# callgrind (docs/performance.md, "Instructions per request under load").
#
# CPU time per request on this shared VM moves by a quarter between runs
# of one build (the neighbours' steal, the kernel's share); the
# instructions a proxy executes per request do not. The gap to nginx is
# user time (system time is level: the same system calls per request), so
# this count is the steady instrument for it. It is not the issue's figure
# (CPU time, user + system, from /proc: proxy.sh); it shows which way and
# how far a change moves the user part.
#
# Each target runs alone under callgrind (about 50× slower, so a few
# thousand requests per second); after WARM of load the counters are
# zeroed (`callgrind_control -z`), wrk runs DURATION, the counters are
# dumped, and the count divided by wrk's completed requests is one
# request's instructions, the runtime's scheduler and collector included.
# Requests in flight at either edge (at most CONNS) are within 1 %.
#
#   test/bench/irpr.sh                  (TARGETS: infergate nginx floorgo)
#
# Env: TARGETS ("infergate nginx floorgo"; also "baseline": infergate built
#      from BASELINE_ROOT, a source tree such as `git archive` of another
#      commit) BIND (127.0.0.1) BASE_PORT (18700) DURATION (10s) WARM (3s)
#      CONNS (64) THREADS (2) ROUNDS (1) LOG_LEVEL (warn: the gateway's; info
#      writes an access line per request, as the daemon does by default,
#      where nginx here runs with access_log off) BASELINE_LOG_LEVEL
#      (LOG_LEVEL; the baseline's own, so BASELINE_ROOT=<this tree>
#      LOG_LEVEL=info BASELINE_LOG_LEVEL=warn measures the access log's
#      share) CACHE_SIM (0; 1 adds callgrind's cache simulation and prints each request's instruction-
#      cache misses, I1mr, and data-cache misses, D1mr+D1mw, of a 32 KiB
#      first level: how much code and data a request walks beyond the
#      first-level caches, which an instruction count does not show)
#      KEEP_CG (unset; a directory: each round's callgrind output is copied
#      there as TARGET.ROUND.cg, with TARGET.ROUND.n holding wrk's request
#      count, for callgrind_annotate)
# Go binaries are built with GOAMD64=v1 (callgrind stops on newer
# instructions) and run with GODEBUG=asyncpreemptoff=1 (callgrind asserts
# on the preemption signal in a cgo binary) and cpu.rdtscp=off (the
# runtime times a contended lock with RDTSCP, which valgrind does not
# decode: the daemon dies of SIGILL now and then); none changes the code
# paths a request takes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGETS=${TARGETS:-"infergate nginx floorgo"}
BIND=${BIND:-127.0.0.1}
BASE_PORT=${BASE_PORT:-18700}
DURATION=${DURATION:-10s}
WARM=${WARM:-3s}
CONNS=${CONNS:-64}
LOG_LEVEL=${LOG_LEVEL:-warn}
CACHE_SIM=${CACHE_SIM:-0}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
for tool in valgrind callgrind_control wrk curl; do
  command -v "$tool" >/dev/null || { echo "irpr.sh: $tool is missing (apt-get install valgrind wrk curl)" >&2; exit 2; }
done
# shellcheck source=nginxconf.sh
. "$ROOT/test/bench/nginxconf.sh"
# shellcheck source=cgvs.sh
. "$ROOT/test/bench/cgvs.sh"
# shellcheck source=smallpost.sh
. "$ROOT/test/bench/smallpost.sh"

ENGINE=$BIND:$((BASE_PORT + 100))
(cd "$ROOT" && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine)
for t in $TARGETS; do
  case $t in
    infergate) (cd "$ROOT" && GOAMD64=v1 go build -o "$TMP/infergate" ./cmd/infergate) ;;
    baseline)
      [[ -n ${BASELINE_ROOT:-} ]] || { echo "irpr.sh: baseline needs BASELINE_ROOT" >&2; exit 2; }
      (cd "$BASELINE_ROOT" && GOAMD64=v1 go build -o "$TMP/baseline" ./cmd/infergate) ;;
    floorgo) (cd "$ROOT" && GOAMD64=v1 go build -o "$TMP/floor" ./test/bench/floor) ;;
    nginx) command -v nginx >/dev/null || { echo "irpr.sh: nginx is missing" >&2; exit 2; } ;;
    *) echo "irpr.sh: unknown target $t" >&2; exit 2 ;;
  esac
done
small_post_lua >"$TMP/post.lua"
"$TMP/fakeengine" -addr "$ENGINE" -no-log >"$TMP/engine.log" 2>&1 &
PIDS+=($!)

# start TARGET PORT → the valgrind process's pid on stdout; the proxy
# listens on BIND:PORT in front of ENGINE.
start() {
  local t=$1 port=$2 cg=$TMP/$1.cg
  local vg=(valgrind --tool=callgrind --callgrind-out-file="$cg")
  ((CACHE_SIM)) && vg+=(--cache-sim=yes)
  case $t in
    infergate | baseline)
      local lvl=$LOG_LEVEL
      [[ $t == baseline ]] && lvl=${BASELINE_LOG_LEVEL:-$LOG_LEVEL}
      one_rule_yaml irpr "$BIND:$port" "$ENGINE" >"$TMP/$t.yaml"
      rm -rf "$TMP/$t.state"
      GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off "${vg[@]}" "$TMP/$t" serve --api-addr "$BIND:$((port + 9))" \
        --state-dir "$TMP/$t.state" --rules "$TMP/$t.yaml" --log-level "$lvl" \
        --max-conns-per-ip 0 --max-engine-conns-per-endpoint 0 >"$TMP/$t.log" 2>&1 &
      ;;
    floorgo)
      GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off "${vg[@]}" "$TMP/floor" -mode goroutine -listen "$BIND:$port" \
        -engine "$ENGINE" >"$TMP/$t.log" 2>&1 &
      ;;
    nginx)
      mkdir -p "$TMP/nginx/logs"
      {
        nginx_conf_head "$TMP" 4096
        echo "  upstream engine { server $ENGINE; keepalive 128; }"
        echo "  server { listen $BIND:$port; location / { proxy_pass http://engine; } }"
        echo "}"
      } | sed 's/^worker_processes auto;/worker_processes 1;\nmaster_process off;/' >"$TMP/nginx.conf"
      "${vg[@]}" nginx -c "$TMP/nginx.conf" -p "$TMP/nginx" >"$TMP/$t.log" 2>&1 &
      ;;
  esac
  echo $!
}

if ((CACHE_SIM)); then
  printf '%-10s %5s %9s %14s %10s %9s %9s\n' target round requests instructions Ir/req I1mr/req D1m/req
else
  printf '%-10s %5s %9s %14s %10s\n' target round requests instructions Ir/req
fi
declare -A SUM SUMI1
port=$BASE_PORT
for ((r = 0; r < ROUNDS; r++)); do
  for t in $TARGETS; do
    port=$((port + 10))
    pid=$(start "$t" $port)
    PIDS+=("$pid")
    url=http://$BIND:$port/v1/completions
    ok=0
    for _ in $(seq 1 150); do # up to 30 s: the proxy starts under valgrind
      if curl -fs -m 2 -o /dev/null -X POST -H 'Content-Type: application/json' \
        -d '{"model":"fake-model","prompt":"hi","max_tokens":4}' "$url"; then ok=1; break; fi
      sleep 0.2
    done
    ((ok)) || { echo "irpr.sh: $t did not answer on $url" >&2; cat "$TMP/$t.log" >&2; exit 1; }
    wrk -c"$CONNS" -t"$THREADS" -d"$WARM" -s "$TMP/post.lua" "$url" >/dev/null
    rm -f "$TMP/$t.cg".*
    callgrind_control -z "$pid" >/dev/null 2>&1
    wrk -c"$CONNS" -t"$THREADS" -d"$DURATION" -s "$TMP/post.lua" "$url" >"$TMP/$t.wrk"
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if grep -q 'Non-2xx' "$TMP/$t.wrk"; then
      echo "irpr.sh: $t answered non-2xx:" >&2; cat "$TMP/$t.wrk" >&2; exit 1
    fi
    n=$(awk '/requests in/{print $1}' "$TMP/$t.wrk")
    if [[ -n ${KEEP_CG:-} ]]; then
      mkdir -p "$KEEP_CG"
      cp "$(compgen -G "$TMP/$t.cg.*" | head -1)" "$KEEP_CG/$t.$r.cg"
      echo "$n" >"$KEEP_CG/$t.$r.n"
    fi
    ir=$(awk '/^totals:/{print $2}' "$TMP/$t.cg".* | head -1)
    per=$((ir / n))
    SUM[$t]=$((${SUM[$t]:-0} + per))
    if ((CACHE_SIM)); then
      # events: Ir Dr Dw I1mr D1mr D1mw …, in that order on the totals line
      read -r i1 d1 < <(awk -v n="$n" '/^totals:/{printf "%.0f %.0f\n", $5/n, ($6+$7)/n; exit}' "$TMP/$t.cg".*)
      SUMI1[$t]=$((${SUMI1[$t]:-0} + i1))
      printf '%-10s %5d %9d %14d %10d %9d %9d\n' "$t" "$r" "$n" "$ir" "$per" "$i1" "$d1"
    else
      printf '%-10s %5d %9d %14d %10d\n' "$t" "$r" "$n" "$ir" "$per"
    fi
  done
done
echo
echo "user-space instructions per request, mean of $ROUNDS round(s) (wrk -c$CONNS -t$THREADS -d$DURATION under callgrind)"
for t in $TARGETS; do
  mean=$((SUM[$t] / ROUNDS))
  vs=$(cg_vs SUM "$t")
  ((CACHE_SIM)) && vs+=$(printf '  %d I1mr/req' $((SUMI1[$t] / ROUNDS)))
  printf '%-10s %8d Ir/req%s\n' "$t" "$mean" "$vs"
done
