#!/usr/bin/env bash
# TLS cost on loopback (issue 11): infergate terminating TLS (security 1)
# against Debian's nginx terminating TLS with the same certificate, both
# proxying to the same fake engine, in the same run. Prints:
#   - full handshakes/s (openssl s_time -new: one client, a fresh session per
#     connection) for ECDSA P-256 and RSA 2048, as ratios infergate/nginx;
#   - new-connection requests/s under concurrency (wrk, Connection: close)
#     and server CPU per connection, ratios infergate/nginx;
#   - keep-alive HTTPS request throughput and server CPU per request against
#     infergate's own plaintext path (target: HTTPS CPU <= 1.3x plaintext).
# Everything started here is killed on exit.
#
# Env: DURATION (5s) CONNS (32) THREADS (2) BASE_PORT (18760)
set -euo pipefail

DURATION=${DURATION:-5s}
SECS=${DURATION%s}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
BASE_PORT=${BASE_PORT:-18760}
ENGINE=127.0.0.1:$BASE_PORT
GW_PLAIN=127.0.0.1:$((BASE_PORT + 1))
GW_ECDSA=127.0.0.1:$((BASE_PORT + 2))
GW_RSA=127.0.0.1:$((BASE_PORT + 3))
NG_PLAIN=127.0.0.1:$((BASE_PORT + 4))
NG_ECDSA=127.0.0.1:$((BASE_PORT + 5))
NG_RSA=127.0.0.1:$((BASE_PORT + 6))
API=127.0.0.1:$((BASE_PORT + 7))
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=/usr/local/go/bin:/usr/sbin:$PATH

for bin in wrk nginx go openssl; do
  command -v "$bin" >/dev/null || { echo "tls.sh: $bin not found" >&2; exit 1; }
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
(cd "$ROOT" && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine && go build -o "$TMP/infergate" ./cmd/infergate)

# A test CA and one leaf per key type, in LoxiLB's layout under the root:
# the default certificate (ECDSA) and host "rsa.bench" (RSA 2048).
CERTS=$TMP/cert
mkdir -p "$CERTS/rsa.bench"
openssl ecparam -name prime256v1 -genkey -noout -out "$TMP/ca.key" 2>/dev/null
openssl req -x509 -new -key "$TMP/ca.key" -sha256 -days 2 -subj "/CN=bench CA" -out "$TMP/ca.crt" 2>/dev/null
printf 'subjectAltName=DNS:localhost,DNS:rsa.bench,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$TMP/ext"
leaf() { # leaf KEYFILE DIR
  openssl req -new -key "$1" -subj "/CN=localhost" -out "$TMP/leaf.csr" 2>/dev/null
  openssl x509 -req -in "$TMP/leaf.csr" -CA "$TMP/ca.crt" -CAkey "$TMP/ca.key" -CAcreateserial -days 2 -sha256 \
    -extfile "$TMP/ext" -out "$2/server.crt" 2>/dev/null
  cp "$1" "$2/server.key"
}
openssl ecparam -name prime256v1 -genkey -noout -out "$TMP/ecdsa.key" 2>/dev/null
openssl genrsa -out "$TMP/rsa.key" 2048 2>/dev/null
leaf "$TMP/ecdsa.key" "$CERTS"
leaf "$TMP/rsa.key" "$CERTS/rsa.bench"

"$TMP/fakeengine" -addr "$ENGINE" -no-log >"$TMP/engine.log" 2>&1 &
ENGINE_PID=$!
PIDS+=($ENGINE_PID)

rule() { # rule ADDR SECURITY HOST
  cat <<YAML
---
apiVersion: infergate/v1
kind: Loadbalancer
metadata: {name: bench-$2-${1#*:}}
spec:
  serviceArguments: {externalIP: ${1%:*}, port: ${1#*:}, protocol: tcp, sel: 0, mode: 4, security: $2, host: "$3"}
  endpoints:
    - {endpointIP: ${ENGINE%:*}, targetPort: ${ENGINE#*:}, weight: 1}
YAML
}
{ rule "$GW_PLAIN" 0 ""; rule "$GW_ECDSA" 1 ""; rule "$GW_RSA" 1 rsa.bench; } >"$TMP/rules.yaml"
# One s_time client opens hundreds of full handshakes a second from one
# address: lift the per-source handshake budget so the figure is the CPU's.
"$TMP/infergate" serve --api-addr "$API" --state-dir "$TMP/state" --cert-root "$CERTS" \
  --rules "$TMP/rules.yaml" --log-level warn --tls-handshakes-per-ip 0 >"$TMP/gateway.log" 2>&1 &
GW_PID=$!
PIDS+=($GW_PID)

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
  ssl_protocols TLSv1.2 TLSv1.3;
  server {
    listen $NG_PLAIN;
    listen $NG_ECDSA ssl;
    ssl_certificate $CERTS/server.crt;
    ssl_certificate_key $CERTS/server.key;
    location / { proxy_pass http://engine; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
  server {
    listen $NG_RSA ssl;
    ssl_certificate $CERTS/rsa.bench/server.crt;
    ssl_certificate_key $CERTS/rsa.bench/server.key;
    location / { proxy_pass http://engine; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
CONF
nginx -c "$TMP/nginx.conf" -p "$TMP" >"$TMP/nginx.out" 2>&1 &
NGINX_PID=$!
PIDS+=($NGINX_PID)

wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "tls.sh: $1 did not come up" >&2; cat "$TMP"/*.log "$TMP/nginx.out" >&2 || true; exit 1
}
for a in "$ENGINE" "$GW_PLAIN" "$GW_ECDSA" "$GW_RSA" "$NG_PLAIN" "$NG_ECDSA" "$NG_RSA"; do wait_port "$a"; done

cat >"$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"fake-model","prompt":"hello","max_tokens":4}'
wrk.headers["Content-Type"] = "application/json"
LUA

cputicks() {
  local t=0 p
  for p in "$@" $(pgrep -P "$1" 2>/dev/null || true); do
    [[ -r /proc/$p/stat ]] && t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat")))
  done
  echo "$t"
}

# wrkrun URL PID [wrk args] → "rps cpu_us_per_request"
wrkrun() {
  local url=$1 pid=$2; shift 2
  wrk -c"$CONNS" -t"$THREADS" -d1s "$@" -s "$TMP/post.lua" "$url" >/dev/null 2>&1 # warm-up
  local c0 c1; c0=$(cputicks "$pid")
  wrk -c"$CONNS" -t"$THREADS" -d"$DURATION" "$@" -s "$TMP/post.lua" "$url" >"$TMP/w.out" 2>&1
  c1=$(cputicks "$pid")
  awk -v ticks=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" '
    /Requests\/sec:/ { rps=$2 } / requests in / { n=$1 } /Non-2xx|Socket errors/ { err=err" "$0 }
    END { printf "%s %.1f%s\n", rps, (n>0 ? ticks*1000000/hz/n : 0), (err==""?"":" #"err) }' "$TMP/w.out"
}

# stime ADDR NAME PID (s_time sends no SNI: each listener serves one certificate) → "handshakes_per_sec cpu_us_per_handshake"
# (s_time prints whole real seconds only, so the wall time is taken here.)
stime() {
  local c0 c1 t0 t1; c0=$(cputicks "$3"); t0=$(date +%s.%N)
  openssl s_time -connect "$1" -CAfile "$TMP/ca.crt" -new -time "$SECS" >"$TMP/s.out" 2>&1 || true
  t1=$(date +%s.%N); c1=$(cputicks "$3")
  awk -v ticks=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v t0="$t0" -v t1="$t1" '
    /connections in .* real seconds/ { n=$1 }
    END { wall=t1-t0; printf "%.0f %.1f\n", (wall>0 ? n/wall : 0), (n>0 ? ticks*1000000/hz/n : 0) }' "$TMP/s.out"
  grep -q 'real seconds' "$TMP/s.out" || { echo "tls.sh: s_time $1 failed:" >&2; tail -3 "$TMP/s.out" >&2; }
}

echo "measuring (each run $DURATION)..."
read -r GS_E GSC_E < <(stime "$GW_ECDSA" localhost "$GW_PID")
read -r NS_E NSC_E < <(stime "$NG_ECDSA" localhost "$NGINX_PID")
read -r GS_R GSC_R < <(stime "$GW_RSA" rsa.bench "$GW_PID")
read -r NS_R NSC_R < <(stime "$NG_RSA" rsa.bench "$NGINX_PID")
read -r GC_E GCC_E GC_E_ERR < <(wrkrun "https://$GW_ECDSA/v1/completions" "$GW_PID" -H "Connection: close")
read -r NC_E NCC_E NC_E_ERR < <(wrkrun "https://$NG_ECDSA/v1/completions" "$NGINX_PID" -H "Connection: close")
read -r GC_R GCC_R GC_R_ERR < <(wrkrun "https://$GW_RSA/v1/completions" "$GW_PID" -H "Connection: close" -H "Host: rsa.bench")
read -r NC_R NCC_R NC_R_ERR < <(wrkrun "https://$NG_RSA/v1/completions" "$NGINX_PID" -H "Connection: close")
read -r GK_P GKC_P GK_P_ERR < <(wrkrun "http://$GW_PLAIN/v1/completions" "$GW_PID")
read -r GK_T GKC_T GK_T_ERR < <(wrkrun "https://$GW_ECDSA/v1/completions" "$GW_PID")
read -r NK_P NKC_P NK_P_ERR < <(wrkrun "http://$NG_PLAIN/v1/completions" "$NGINX_PID")
read -r NK_T NKC_T NK_T_ERR < <(wrkrun "https://$NG_ECDSA/v1/completions" "$NGINX_PID")

printf "\nTLS on loopback, same certificates, same engine; infergate vs nginx %s\n" "$(nginx -v 2>&1 | sed 's/.*: //')"
printf "%-44s %12s %12s %8s\n" "" infergate nginx ratio
row() { awk -v l="$1" -v a="$2" -v b="$3" -v u="$4" 'BEGIN { printf "%-44s %10.0f%s %10.0f%s %7.2fx\n", l, a, u, b, u, (b>0?a/b:0) }'; }
row "full handshakes/s, ECDSA P-256 (s_time -new)" "$GS_E" "$NS_E" ""
row "full handshakes/s, RSA 2048 (s_time -new)" "$GS_R" "$NS_R" ""
row "server CPU/handshake ECDSA (s_time) us" "$GSC_E" "$NSC_E" ""
row "server CPU/handshake RSA (s_time) us" "$GSC_R" "$NSC_R" ""
row "new-conn req/s ECDSA (wrk -c$CONNS close)" "$GC_E" "$NC_E" ""
row "new-conn req/s RSA (wrk -c$CONNS close)" "$GC_R" "$NC_R" ""
row "server CPU/new conn ECDSA us" "$GCC_E" "$NCC_E" ""
row "server CPU/new conn RSA us" "$GCC_R" "$NCC_R" ""
row "keep-alive req/s plaintext" "$GK_P" "$NK_P" ""
row "keep-alive req/s HTTPS (ECDSA)" "$GK_T" "$NK_T" ""
row "keep-alive CPU/req plaintext us" "$GKC_P" "$NKC_P" ""
row "keep-alive CPU/req HTTPS us" "$GKC_T" "$NKC_T" ""
awk -v a="$GKC_T" -v b="$GKC_P" -v c="$NKC_T" -v d="$NKC_P" 'BEGIN {
  printf "\nHTTPS/plaintext CPU per keep-alive request: infergate %.2fx, nginx %.2fx (target infergate <= 1.3x)\n", a/b, c/d }'
for e in "$GC_E_ERR" "$NC_E_ERR" "$GC_R_ERR" "$NC_R_ERR" "$GK_P_ERR" "$GK_T_ERR" "$NK_P_ERR" "$NK_T_ERR"; do
  [[ -n $e ]] && echo "wrk reported:$e"
done
exit 0
