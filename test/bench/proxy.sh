#!/usr/bin/env bash
# Proxy load comparison on loopback, all in one run against the same fake
# engine: wrk against (a) the engine directly, (b) infergate (`infergate
# serve` with one rule from a YAML file), and the reference proxies (c) nginx
# (proxy_pass, upstream keepalive), (d) HAProxy (mode http, http-reuse) and
# (e) Caddy (reverse_proxy). Prints req/s, p50, p99 and the proxy's CPU per
# request (user+system ticks of its process tree from /proc, divided by the
# requests wrk completed), with ratios against nginx, then the SSE figures
# (test/bench/ssebench): CPU per relayed event and RSS per open stream, and
# how many concurrent streams hold.
#
# CPU per request is the load-robust figure: on a shared box req/s and
# latency mostly measure the other tenants. Raw wrk/ssebench output and the
# configs are kept under RESULTS (default test/bench/results/<UTC time>).
#
# The small-request table is ROUNDS rounds of one wrk run per target, in an
# order that changes every round (forward, then reversed, then rotated by
# one and so on: A B, B A, B A, A B for two targets), so every target runs
# in every position equally often over 2 × (number of targets) rounds and
# in a balanced mix of early and late positions over any even count. A
# fixed order measured the gateway run second at 1.5–1.7× the one run last
# on a loaded box (docs/performance.md). Each figure is the mean over the
# rounds with its spread (min–max); ratios against nginx are taken round by
# round (the two ran minutes apart at most) and then averaged.
#
# Env: DURATION (10s, per run) ROUNDS (4) CONNS (64) THREADS (2)
#      BASE_PORT (18000) BIND (127.0.0.1: the address every listener uses)
#      TARGETS ("infergate nginx haproxy caddy"; "direct" always runs;
#      also floorgo, floornet, floorloop, floorblock: test/bench/floor's
#      least proxies, goroutine per connection on raw calls, the same on
#      net.Conn, an epoll loop per CPU waited on by Go's netpoller, the same
#      loops blocking in epoll_wait; floor.sh runs them beside nginx and
#      infergate)
#      WRK (1; 0 skips the small-request table, e.g. to rerun only streams)
#      SSE_STREAMS (1000; 0 skips the SSE figure) SSE_TOKENS (100)
#      SSE_DELAY (20ms) SSE_TARGETS ("infergate nginx") SSE_ROUNDS (1; 2 or
#      more alternate the order: CPU per event is then the rounds' mean, RSS
#      per stream the first round's)
#      HOLD_STREAMS (10000; 0 skips the hold test) HOLD_TOKENS (20)
#      HOLD_DELAY (1s): the hold test's streams tick slower, so 10,000 of
#      them stay within what a 2-core box sustains.
#      GATEWAY_BIN=dpserve runs the bare datapath (test/bench/dpserve) instead
#      of the daemon, e.g. for CPU profiles (-cpuprofile).
#      BASELINE_ROOT=/path/to/other/checkout also runs that tree's gateway
#      (e.g. `git archive <rev> | tar -x -C /tmp/base`) as "baseline" in the
#      same run and prints this tree's numbers as ratios against it.
set -euo pipefail

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-4}
BIND=${BIND:-127.0.0.1}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
BASE_PORT=${BASE_PORT:-18000}
TARGETS=${TARGETS:-infergate nginx haproxy caddy}
SSE_STREAMS=${SSE_STREAMS:-1000}
SSE_TOKENS=${SSE_TOKENS:-100}
SSE_DELAY=${SSE_DELAY:-20ms}
SSE_TARGETS=${SSE_TARGETS:-infergate nginx}
SSE_ROUNDS=${SSE_ROUNDS:-1}
HOLD_STREAMS=${HOLD_STREAMS:-10000}
HOLD_TOKENS=${HOLD_TOKENS:-20}
HOLD_DELAY=${HOLD_DELAY:-1s}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=nginxconf.sh
. "$ROOT/test/bench/nginxconf.sh"
# shellcheck source=smallpost.sh
. "$ROOT/test/bench/smallpost.sh"
RESULTS=${RESULTS:-$ROOT/test/bench/results/$(date -u +%Y%m%dT%H%M%SZ)}
export PATH=/usr/local/go/bin:/usr/sbin:$PATH

# Ports: engine, then per target a proxy port (and an API port for gateways).
ENGINE=$BIND:$BASE_PORT
SSE_ENGINE=$BIND:$((BASE_PORT + 1))
HOLD_ENGINE=$BIND:$((BASE_PORT + 2))
declare -A PORT=([infergate]=10 [nginx]=20 [haproxy]=30 [caddy]=40 [baseline]=50 [floorgo]=60 [floornet]=70 [floorloop]=80 [floorblock]=90)
declare -A FLOOR_MODE=([floorgo]=goroutine [floornet]=goroutine-net [floorloop]=loop [floorblock]=loop-block)

for bin in wrk go; do
  command -v "$bin" >/dev/null || { echo "proxy.sh: $bin not found" >&2; exit 1; }
done
for t in $TARGETS; do
  case $t in
    nginx|haproxy|caddy) command -v "$t" >/dev/null || { echo "proxy.sh: $t not found (make bench installs it)" >&2; exit 1; } ;;
    infergate) ;;
    *) [[ -n ${FLOOR_MODE[$t]:-} ]] || { echo "proxy.sh: unknown target $t" >&2; exit 2; } ;;
  esac
done
[[ -n ${BASELINE_ROOT:-} ]] && TARGETS="$TARGETS baseline"

# Streams need two descriptors each in the proxy (and one in the client):
# raise the soft limit as far as the hard one allows, and hold at most what
# fits in one process, with 2,200 descriptors to spare for listeners and the
# idle engine connections pooled by the earlier phases (infergate keeps up to
# MaxIdleConnsPerHost = 1,024 per endpoint: the SSE phase leaves ~1,000 idle).
# A container's hard limit of 20,000 allows 8,900 proxied streams; 10,000
# needs 22,200.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
NOFILE=$(ulimit -n)
HOLD_FIT=$(((NOFILE - 2200) / 2))
if [[ $HOLD_STREAMS -gt $HOLD_FIT ]]; then
  echo "proxy.sh: ulimit -n is $NOFILE: holding $HOLD_FIT streams instead of $HOLD_STREAMS" >&2
  HOLD_ASKED=$HOLD_STREAMS
  HOLD_STREAMS=$HOLD_FIT
fi

TMP=$(mktemp -d)
mkdir -p "$RESULTS"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  cp "$TMP"/*.log "$RESULTS/" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

echo "building fake engine, infergate, floor and ssebench... (results in $RESULTS)"
(cd "$ROOT" && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine \
  && go build -o "$TMP/dpserve" ./test/bench/dpserve \
  && go build -o "$TMP/floor" ./test/bench/floor \
  && go build -o "$TMP/ssebench" ./test/bench/ssebench \
  && go build -o "$TMP/infergate" ./cmd/infergate)
if [[ -n ${BASELINE_ROOT:-} ]]; then
  mkdir -p "$TMP/base"
  (cd "$BASELINE_ROOT" && go build -o "$TMP/base/dpserve" ./test/bench/dpserve \
    && go build -o "$TMP/base/infergate" ./cmd/infergate)
fi

start_engine() { # ADDR ARGS...
  local a=$1; shift
  "$TMP/fakeengine" -addr "$a" -no-log "$@" >>"$TMP/engine.log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
}
start_engine "$ENGINE"
ENGINE_PID=$LAST_PID
start_engine "$SSE_ENGINE" -tokens "$SSE_TOKENS" -token-delay "$SSE_DELAY"
start_engine "$HOLD_ENGINE" -tokens "$HOLD_TOKENS" -token-delay "$HOLD_DELAY"

# addr TARGET PHASE → the target's listen address for phase 0 (plain), 1
# (SSE engine) or 2 (hold engine); each phase has its own upstream.
addr() { echo "$BIND:$((BASE_PORT + ${PORT[$1]} + $2))"; }
upstream() { case $1 in 0) echo "$ENGINE" ;; 1) echo "$SSE_ENGINE" ;; 2) echo "$HOLD_ENGINE" ;; esac; }

declare -A TPID
start_gateway() { # NAME BINDIR
  local name=$1 bin=$2 ph
  if [[ ${GATEWAY_BIN:-infergate} == dpserve ]]; then
    "$bin/dpserve" -listen "$(addr "$name" 0)" -engine "$ENGINE" >"$TMP/$name.log" 2>&1 &
  else
    : >"$RESULTS/$name.yaml"
    for ph in 0 1 2; do
      local a u
      a=$(addr "$name" $ph) u=$(upstream $ph)
      one_rule_yaml "bench$ph" "$a" "$u" >>"$RESULTS/$name.yaml"
    done
    # Every load client is 127.0.0.1: the per-address cap (1,024 by
    # default) would refuse the hold test's streams, and the engine
    # connection cap (256 per endpoint) would queue all but 256 of them
    # behind one fake engine; nginx has neither cap.
    "$bin/infergate" serve --api-addr "$BIND:$((BASE_PORT + ${PORT[$name]} + 9))" \
      --state-dir "$TMP/$name.state" --rules "$RESULTS/$name.yaml" --log-level warn \
      --max-conns-per-ip 0 --max-engine-conns-per-endpoint 0 >"$TMP/$name.log" 2>&1 &
  fi
  PIDS+=($!)
  TPID[$name]=$!
}

start_nginx() {
  mkdir -p "$TMP/nginx/logs"
  local f=$RESULTS/nginx.conf ph
  nginx_conf_head "$TMP" "$NOFILE" >"$f"
  for ph in 0 1 2; do
    cat >>"$f" <<CONF
  upstream engine$ph { server $(upstream $ph); keepalive 128; }
  server { listen $(addr nginx $ph); location / { proxy_pass http://engine$ph; } }
CONF
  done
  echo "}" >>"$f"
  nginx -c "$f" -p "$TMP/nginx" >"$TMP/nginx.log" 2>&1 &
  PIDS+=($!)
  TPID[nginx]=$!
}

start_haproxy() {
  local f=$RESULTS/haproxy.cfg ph
  cat >"$f" <<CONF
global
  nbthread 2
  maxconn $HOLD_FIT
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  http-reuse always
CONF
  for ph in 0 1 2; do
    cat >>"$f" <<CONF
frontend f$ph
  bind $(addr haproxy $ph)
  default_backend b$ph
backend b$ph
  server engine $(upstream $ph)
CONF
  done
  haproxy -db -f "$f" >"$TMP/haproxy.log" 2>&1 &
  PIDS+=($!)
  TPID[haproxy]=$!
}

start_caddy() {
  local f=$RESULTS/Caddyfile ph
  printf '{\n  admin off\n  auto_https off\n}\n' >"$f"
  for ph in 0 1 2; do
    # bind: only the site's own address (Caddy listens on every address
    # of the port otherwise, which collides with other tenants' sockets).
    printf 'http://%s {\n  bind %s\n  reverse_proxy %s {\n    flush_interval -1\n  }\n}\n' "$(addr caddy $ph)" "$BIND" "$(upstream $ph)" >>"$f"
  done
  HOME=$TMP XDG_DATA_HOME=$TMP/caddy XDG_CONFIG_HOME=$TMP/caddy \
    caddy run --config "$f" --adapter caddyfile >"$TMP/caddy.log" 2>&1 &
  PIDS+=($!)
  TPID[caddy]=$!
}

# start_floor NAME: test/bench/floor in NAME's mode, in front of the
# small-request engine only (it takes no part in the SSE and hold tests).
start_floor() {
  "$TMP/floor" -mode "${FLOOR_MODE[$1]}" -listen "$(addr "$1" 0)" -engine "$ENGINE" >"$TMP/$1.log" 2>&1 &
  PIDS+=($!)
  TPID[$1]=$!
}

for t in $TARGETS; do
  case $t in
    floor*) start_floor "$t" ;; # a FLOOR_MODE key, checked above
    infergate) start_gateway infergate "$TMP" ;;
    baseline) start_gateway baseline "$TMP/base" ;;
    nginx) start_nginx ;;
    haproxy) start_haproxy ;;
    caddy) start_caddy ;;
  esac
done

wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "proxy.sh: $1 did not come up" >&2; cat "$TMP"/*.log >&2 || true; exit 1
}
wait_port "$ENGINE"; wait_port "$SSE_ENGINE"; wait_port "$HOLD_ENGINE"
for t in $TARGETS; do wait_port "$(addr "$t" 0)"; done

small_post_lua >"$TMP/post.lua"

# cputicks PID → "user system" clock ticks of the process (all its
# threads) and its children (nginx workers are children of the master).
cputicks() {
  local u=0 sy=0 p f
  for p in "$1" $(pgrep -P "$1" 2>/dev/null || true); do
    [[ -r /proc/$p/stat ]] || continue
    read -r -a f < <(sed 's/.*) //' "/proc/$p/stat")
    u=$((u + f[11])) sy=$((sy + f[12]))
  done
  echo "$u $sy"
}

# ctxsw PID → the context switches (voluntary and not) of every thread of
# the process and its children: a count the box's load moves less than
# time, and the cost of each park and wake-up a proxy's waits take.
ctxsw() {
  local p
  for p in "$1" $(pgrep -P "$1" 2>/dev/null || true); do
    cat /proc/"$p"/task/*/status 2>/dev/null || true
  done | awk '/^(non)?voluntary_ctxt_switches:/ { n += $2 } END { print n + 0 }'
}

# run NAME ADDR PID FILE → "rps p50_us p99_us non2xx errors cpu_us_per_req
# user_us_per_req sys_us_per_req cs_per_req engine_cpu_us_per_req": the
# engine's CPU says whether a proxy moved cost onto it (smaller batches of
# reads per wake-up), which CPU per request of the proxy alone hides.
run() {
  wrk -c"$CONNS" -t"$THREADS" -d1s -s "$TMP/post.lua" "http://$2/v1/completions" >/dev/null # warm-up
  local u0 s0 u1 s1 c0 c1 eu0 es0 eu1 es1
  c0=$(ctxsw "$3")
  read -r u0 s0 < <(cputicks "$3")
  read -r eu0 es0 < <(cputicks "$ENGINE_PID")
  wrk -c"$CONNS" -t"$THREADS" -d"$DURATION" --latency -s "$TMP/post.lua" "http://$2/v1/completions" >"$4"
  read -r eu1 es1 < <(cputicks "$ENGINE_PID")
  read -r u1 s1 < <(cputicks "$3")
  c1=$(ctxsw "$3")
  awk -v ut=$((u1 - u0)) -v st=$((s1 - s0)) -v cs=$((c1 - c0)) -v et=$((eu1 + es1 - eu0 - es0)) -v hz="$(getconf CLK_TCK)" '
    function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return v*1000; if (v ~ /s$/) return v*1000000; return v }
    /Requests\/sec:/ { rps=$2 }
    / requests in / { n=$1 }
    /^ +50%/ { p50=us($2) }
    /^ +99%/ { p99=us($2) }
    /Non-2xx/ { bad=$NF }
    /Socket errors/ { gsub(/,/, ""); err=$4+$6+$8+$10 }
    END { k = (n>0 ? 1000000/hz/n : 0)
      printf "%s %s %s %s %s %.1f %.1f %.1f %.2f %.1f\n", rps, p50, p99, (bad==""?0:bad), (err==""?0:err), (ut+st)*k, ut*k, st*k, (n>0 ? cs/n : 0), et*k }' "$4"
}

# order ROUND → the targets in that round's order: the list rotated by
# ROUND/2, reversed in odd rounds (A B, B A, B A, A B, ...).
order() {
  local -a t=(direct $TARGETS) o=()
  local n=${#t[@]} s=$((($1 / 2) % ${#t[@]})) i
  for ((i = 0; i < n; i++)); do o+=("${t[(s + i) % n]}"); done
  if (($1 % 2)); then for ((i = n - 1; i >= 0; i--)); do printf '%s ' "${o[i]}"; done; else printf '%s ' "${o[@]}"; fi
}

if [[ ${WRK:-1} != 0 ]]; then
# rounds.txt: one line per run (round, position, target, load average, then
# run's fields). For "direct" the CPU column is the fake engine's own (a
# bare Go net/http server): the floor any net/http-based proxy pays once
# per side.
ROUNDS_FILE=$RESULTS/rounds.txt
echo "round pos target load1 rps p50_us p99_us non2xx errors cpu_us user_us sys_us cs_per_req engine_cpu_us" >"$ROUNDS_FILE"
for ((r = 0; r < ROUNDS; r++)); do
  pos=0
  for t in $(order $r); do
    pos=$((pos + 1))
    if [[ $t == direct ]]; then a=$ENGINE pid=$ENGINE_PID; else a=$(addr "$t" 0) pid=${TPID[$t]}; fi
    line=$(run "$t" "$a" "$pid" "$RESULTS/$t.r$r.wrk")
    echo "$r $pos $t $(cut -d' ' -f1 /proc/loadavg) $line" >>"$ROUNDS_FILE"
  done
done

{
  printf "\nwrk -c%s -t%s -d%s × %s rounds (order alternated), POST /v1/completions (small JSON), all on loopback, load average %s\n" \
    "$CONNS" "$THREADS" "$DURATION" "$ROUNDS" "$(cut -d' ' -f1-3 /proc/loadavg)"
  printf "means over the rounds [min-max]; ratios to nginx and to baseline are per round, then averaged\n"
  awk -v targets="direct $TARGETS" -v baseline="${BASELINE_ROOT:-}" '
    NR == 1 { next }
    { k = $1 SUBSEP $3; rps[k] = $5; p50[k] = $6; p99[k] = $7; bad[$3] += $8; err[$3] += $9
      cpu[k] = $10; usr[k] = $11; sys[k] = $12; cs[k] = $13; ecpu[k] = $14; if ($1 + 1 > R) R = $1 + 1 }
    function stat(a, t, fmt,   r, v, s, lo, hi) {
      s = 0; lo = ""; hi = ""
      for (r = 0; r < R; r++) { v = a[r, t]; s += v; if (lo == "" || v < lo) lo = v; if (hi == "" || v > hi) hi = v }
      return sprintf(fmt " [" fmt "-" fmt "]", s / R, lo, hi)
    }
    function ratio(a, t, ref,   r, v, s, lo, hi) {
      if (!((0, ref) in a)) return "-"
      s = 0; lo = ""; hi = ""
      for (r = 0; r < R; r++) { v = a[r, t] / a[r, ref]; s += v; if (lo == "" || v < lo) lo = v; if (hi == "" || v > hi) hi = v }
      return sprintf("%.2fx [%.2f-%.2f]", s / R, lo, hi)
    }
    function mean(a, t,   r, s) { s = 0; for (r = 0; r < R; r++) s += a[r, t]; return s / R }
    END {
      n = split(targets, T, " ")
      printf "%-10s %-22s %-20s %8s %9s %-24s %-17s %-21s %-21s %9s %7s %10s\n", "target", "req/s", "p50(us)", "p99(us)", "non2xx/err", "cpu/req(us)", "user+sys(us)", "rps/nginx", "cpu/nginx", "+p50(us)", "cs/req", "engine(us)"
      for (i = 1; i <= n; i++) {
        t = T[i]
        add = (t == "direct" ? "-" : sprintf("%+.0f", mean(p50, t) - mean(p50, "direct")))
        printf "%-10s %-22s %-20s %8.0f %9s %-24s %-17s %-21s %-21s %9s %7.2f %10.1f\n", t, stat(rps, t, "%.0f"), stat(p50, t, "%.0f"), mean(p99, t),
          bad[t] "/" err[t], stat(cpu, t, "%.1f") (t == "direct" ? "*" : ""), sprintf("%.1f+%.1f", mean(usr, t), mean(sys, t)),
          (t == "nginx" ? "-" : ratio(rps, t, "nginx")), (t == "nginx" || t == "direct" ? "-" : ratio(cpu, t, "nginx")), add, mean(cs, t), mean(ecpu, t)
      }
      print "* direct: the fake engine'"'"'s own CPU"
      if ((0, "nginx") in cpu && (0, "infergate") in cpu) {
        c = 0; q = 0; for (r = 0; r < R; r++) { c += cpu[r, "infergate"] / cpu[r, "nginx"]; q += rps[r, "infergate"] / rps[r, "nginx"] }
        c /= R; q /= R; d = mean(p50, "infergate") - mean(p50, "nginx")
        printf "\ntargets (issue 25): cpu/req <= 1.2x nginx: %.2fx %s; req/s >= 0.9x nginx: %.2fx %s; added p50 <= nginx+100us: %+.0fus %s\n",
          c, (c <= 1.2 ? "met" : "NOT met"), q, (q >= 0.9 ? "met" : "NOT met"), d, (d <= 100 ? "met" : "NOT met")
      }
      if (baseline != "" && (0, "baseline") in cpu)
        printf "infergate/baseline (%s): throughput %s, proxy CPU per request %s\n", baseline, ratio(rps, "infergate", "baseline"), ratio(cpu, "infergate", "baseline")
    }' "$ROUNDS_FILE"
} | tee "$RESULTS/summary.txt"
# The per-round figures follow the summary, for a look at the spread.
column -t "$ROUNDS_FILE" | sed 's/^/  /' | tee -a "$RESULTS/summary.txt"
fi

# SSE figures: every target in SSE_TARGETS against the same ticking engine,
# SSE_ROUNDS times, the order reversed every other round (the target run
# first measured higher in both orders on a loaded box): CPU per event is
# the mean over the rounds, RSS per stream the first round's.
if [[ $SSE_STREAMS -gt 0 ]]; then
  declare -A SCPU SRSS
  sse_order() { # ROUND → SSE_TARGETS, reversed in odd rounds
    local -a t=($SSE_TARGETS)
    local i
    if (($1 % 2)); then for ((i = ${#t[@]} - 1; i >= 0; i--)); do printf '%s ' "${t[i]}"; done; else printf '%s ' "${t[@]}"; fi
  }
  for ((r = 0; r < SSE_ROUNDS; r++)); do
    for t in $(sse_order $r); do
      [[ -n ${TPID[$t]:-} ]] || continue
      wait_port "$(addr "$t" 1)"
      f=$RESULTS/$t.r$r.sse
      "$TMP/ssebench" -label "$t" -url "http://$(addr "$t" 1)/v1/completions" -streams "$SSE_STREAMS" \
        -pid "${TPID[$t]}" -timeout 2m >"$f" 2>&1 || true
      sed "s/^/round=$r /" "$f" >>"$RESULTS/$t.sse"
      SCPU[$t]="${SCPU[$t]:-} $(grep -o 'cpu_us_per_event=[0-9.]*' "$f" | cut -d= -f2 || true)"
      # RSS per stream from the first round only: a later round starts
      # from the heap the first one grew, which the process keeps.
      ((r > 0)) || SRSS[$t]=$(grep -o 'rss_kb_per_stream=[-0-9.]*' "$f" | cut -d= -f2 || true)
    done
  done
  mean() { echo "$*" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; if (NF) printf "%.2f", s / NF }'; }
  {
    printf "\n%s concurrent SSE streams of %s events every %s, %s round(s)\n" "$SSE_STREAMS" "$SSE_TOKENS" "$SSE_DELAY" "$SSE_ROUNDS"
    for t in $SSE_TARGETS; do [[ -f $RESULTS/$t.sse ]] && sed 's/^/  /' "$RESULTS/$t.sse"; done
    for t in $SSE_TARGETS; do
      [[ -n ${SCPU[$t]:-} ]] && printf "  %s: cpu_us_per_event=%s (mean) rss_kb_per_stream=%s (first round)\n" "$t" "$(mean ${SCPU[$t]})" "${SRSS[$t]:-}"
    done
    # The issue's stream targets are stated for 1,000 streams; fewer make
    # RSS per stream mostly noise.
    if [[ -n ${SCPU[infergate]:-} && -n ${SCPU[nginx]:-} && $SSE_STREAMS -ge 1000 ]]; then
      awk -v c="$(mean ${SCPU[infergate]})" -v nc="$(mean ${SCPU[nginx]})" -v m="${SRSS[infergate]}" -v nm="${SRSS[nginx]}" 'BEGIN {
        printf "targets (issue 25): cpu/event <= nginx: %.2fx %s; RSS/stream <= 24 KB: %.1f KB (nginx %.1f KB) %s\n",
          c/nc, (c <= nc ? "met" : "NOT met"), m, nm, (m <= 24 ? "met" : "NOT met") }'
    fi
  } | tee -a "$RESULTS/summary.txt"
fi

# Hold test: HOLD_STREAMS concurrent slower streams, infergate then nginx.
if [[ $HOLD_STREAMS -gt 0 ]]; then
  {
    printf "\nhold: %s concurrent SSE streams of %s events every %s (ulimit -n %s%s)\n" "$HOLD_STREAMS" "$HOLD_TOKENS" "$HOLD_DELAY" \
      "$NOFILE" "${HOLD_ASKED:+; $HOLD_ASKED asked, bounded by the fd limit}"
    for t in infergate nginx; do
      [[ -n ${TPID[$t]:-} ]] || continue
      "$TMP/ssebench" -label "$t" -url "http://$(addr "$t" 2)/v1/completions" -streams "$HOLD_STREAMS" \
        -batch 1000 -batch-gap 100ms -pid "${TPID[$t]}" -timeout 3m >"$RESULTS/$t.hold" 2>&1 || true
      sed 's/^/  /' "$RESULTS/$t.hold"
    done
  } | tee -a "$RESULTS/summary.txt"
fi
