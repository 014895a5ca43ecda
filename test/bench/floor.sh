#!/usr/bin/env bash
# The floor comparison (docs/performance.md, "The floor under a Go proxy"):
# proxy.sh's small-request table with test/bench/floor's four least
# proxies beside nginx and infergate, all in front of the same fake engine,
# measured alike (wrk, CPU per request and context switches per request
# from /proc), in the order proxy.sh alternates round by round.
#
#   floorgo    goroutine per connection, raw socket calls, no empty reads
#   floornet   the same on net.Conn as it comes
#   floorloop  one edge-triggered epoll loop per CPU, Go's netpoller waiting
#              on each loop's epoll set
#   floorblock the same loops blocking in epoll_wait
#
# Env: as proxy.sh (ROUNDS, DURATION, BIND, BASE_PORT, ...); TARGETS
# defaults to the four above, infergate and nginx; the SSE and hold tests
# are off.
set -euo pipefail
export TARGETS=${TARGETS:-infergate nginx floorgo floornet floorloop floorblock}
export SSE_STREAMS=0 HOLD_STREAMS=0
exec "$(dirname "$0")/proxy.sh" "$@"
