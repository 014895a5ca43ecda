package datapath

import (
	"net/http"
	"net/netip"
	"strconv"

	"github.com/infergate/infergate/admission"
	"github.com/infergate/infergate/datapath/clienterr"
	"github.com/infergate/infergate/metrics"
)

// CodeTooManyRequests (503, or 429 for the per-address cap, with
// Retry-After): a cap on requests in flight is reached (admission: every
// HTTP/2 stream counts, not only connections).
const CodeTooManyRequests = "too_many_requests_in_flight"

// admitRequests wraps the listener's handler: each request in flight
// holds a slot in the admission gate (global, per client address, per VIP),
// taken before anything is read or routed and given back when the handler
// returns. Streams over a cap are answered at once, without touching an
// engine.
func (ln *listener) admitRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ip netip.Addr // parsed only when counted: 0.3 % of the daemon's samples under small requests
		if ln.adm.CountsPerIP() {
			ip = requestIP(w, r)
		}
		if reason := ln.adm.EnterRequest(ip); reason != "" {
			ln.refuseRequest(w, r, reason)
			return
		}
		defer ln.adm.LeaveRequest(ip)
		next.ServeHTTP(w, r)
	})
}

// remoteIPWriter is a front end's ResponseWriter that parsed its
// connection's client address once for all its requests (h1, given
// admission.RemoteIP as its Server.RemoteIP).
type remoteIPWriter interface {
	RemoteIP() (netip.Addr, bool)
}

// requestIP is admission.RemoteIP(r.RemoteAddr): the connection's parse
// when the front end kept one, else a parse of the request's own. Why:
// the same string was parsed at every request of a keep-alive connection
// (~390 instructions of a small request).
func requestIP(w http.ResponseWriter, r *http.Request) netip.Addr {
	if rw, ok := w.(remoteIPWriter); ok {
		if ip, ok := rw.RemoteIP(); ok {
			return ip
		}
	}
	return admission.RemoteIP(r.RemoteAddr)
}

// refuseRequest answers a request over a cap: 429 when the client's own
// address is over its share, 503 when the gateway or the VIP is full.
func (ln *listener) refuseRequest(w http.ResponseWriter, r *http.Request, reason string) {
	ln.setHSTS(w, r)
	w.Header().Set(headerRetryAfter, "1")
	status, msg := http.StatusServiceUnavailable, "the gateway is serving as many requests as it may; retry shortly"
	switch reason {
	case metrics.RefusedPerIP:
		status, msg = http.StatusTooManyRequests, "too many requests in flight from this address; retry when some have finished"
	case metrics.RefusedListener:
		msg = "this address is serving as many requests as its connectionLimit allows; retry shortly"
	}
	clienterr.Write(w, status, CodeTooManyRequests, msg)
	ln.rt.m.Requests.WithLabelValues("", "", strconv.Itoa(status), CodeTooManyRequests).Inc()
}
