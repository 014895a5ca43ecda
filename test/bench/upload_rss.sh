#!/usr/bin/env bash
# Gateway memory during large multipart uploads (issue 14): the built
# `infergate serve` with one single-pool rule in front of the fake engine
# (internal/fakeengine: it counts the file part as it streams, never holds it);
# curl posts an OpenAI-SDK-shaped transcription upload (model + file parts)
# of each SIZES_MB while the gateway's VmRSS is sampled every 20 ms. Prints
# idle RSS, peak RSS per size and the peak ratio largest/smallest (flat in
# the upload's size ≈ 1.0). Everything started here is killed on exit.
#
# Env: SIZES_MB ("20 200") BASE_PORT (18100) RATE (curl --limit-rate, 200M)
#      GATEWAY_ROOT=/path/to/other/checkout builds the gateway from that tree
#      (e.g. the commit before issue 14, which buffered bodies whole) while
#      the fake engine stays this tree's.
set -euo pipefail

SIZES_MB=${SIZES_MB:-"20 200"}
BASE_PORT=${BASE_PORT:-18100}
RATE=${RATE:-200M}
ENGINE=127.0.0.1:$BASE_PORT
GATEWAY=127.0.0.1:$((BASE_PORT + 1))
API=127.0.0.1:$((BASE_PORT + 2))
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=/usr/local/go/bin:$PATH

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

(cd "$ROOT" && go build -o "$TMP/fakeengine" ./internal/fakeengine/cmd/fakeengine)
(cd "${GATEWAY_ROOT:-$ROOT}" && go build -o "$TMP/infergate" ./cmd/infergate)
"$TMP/fakeengine" -addr "$ENGINE" >"$TMP/engine.log" 2>&1 &
PIDS+=($!)
cat >"$TMP/rule.yaml" <<YAML
apiVersion: infergate/v1
kind: Loadbalancer
metadata:
  name: upload
spec:
  serviceArguments: {externalIP: ${GATEWAY%:*}, port: ${GATEWAY#*:}, protocol: tcp, sel: 0, mode: 4}
  endpoints:
    - {endpointIP: ${ENGINE%:*}, targetPort: ${ENGINE#*:}, weight: 1}
YAML
"$TMP/infergate" serve --api-addr "$API" --state-dir "$TMP/state" --rules "$TMP/rule.yaml" --log-level warn >"$TMP/gw.log" 2>&1 &
GW=$!
PIDS+=($GW)
for _ in $(seq 200); do
  (exec 3<>"/dev/tcp/${GATEWAY%:*}/${GATEWAY#*:}") 2>/dev/null && break
  sleep 0.05
done

rss() { awk '/^VmRSS/ {print $2}' "/proc/$GW/status"; }
echo "gateway idle RSS: $(rss) KiB"
first="" last=""
for mb in $SIZES_MB; do
  head -c "$((mb << 20))" /dev/zero >"$TMP/audio.wav"
  curl -sS --limit-rate "$RATE" -o "$TMP/out.json" -D "$TMP/hdr" \
    -F model=whisper-1 -F "file=@$TMP/audio.wav;type=audio/wav" "http://$GATEWAY/v1/audio/transcriptions" &
  CURL=$!
  peak=0
  while kill -0 "$CURL" 2>/dev/null; do
    r=$(rss); ((r > peak)) && peak=$r
    sleep 0.02
  done
  wait "$CURL"
  got=$(awk -F': ' 'tolower($1)=="x-fake-upload-bytes" {print $2}' "$TMP/hdr" | tr -d '\r')
  [[ $got == $((mb << 20)) ]] || { echo "upload_rss.sh: engine counted ${got:-nothing} of $((mb << 20)) bytes" >&2; cat "$TMP/out.json" >&2; exit 1; }
  echo "upload ${mb} MiB: engine received all $got bytes; gateway peak RSS ${peak} KiB"
  [[ -z $first ]] && first=$peak
  last=$peak
  rm -f "$TMP/audio.wav"
done
awk -v a="$first" -v b="$last" 'BEGIN {printf "peak RSS ratio largest/smallest upload: %.2f\n", b / a}'
