package h1

import (
	"net/http"
	"net/url"
)

// A request's state (the http.Request, its URL, body reader, response
// writer and the handler's scratch) is taken from the server's pool at
// its head and given back once its response is finished (putState): a
// small proxied request then allocates none of its ~900 bytes, nor the
// handler's own per-request state that rides in Scratch. A pool, not a
// state kept by each connection: an idle connection holds no request
// memory (as it holds no read buffer), for a pool Get and Put per request
// that cost ~0.3 % of the daemon's samples more than a kept state did.
//
// The rule that makes this safe is net/http's, which the package contract
// states: nothing uses the request, its URL, header or body, or the
// ResponseWriter once the handler has returned. The state goes back later
// still, after the connection has written the response (a small body's
// head goes out then, and may carry header values the handler keeps in
// its scratch). A handler that panicked does not give its state back.
//
// Under -race, or with Server.poison set, a finished state is poisoned
// instead of reused: its request reads PoisonMethod and an empty URL, its
// ResponseWriter panics, and a scratch that is a Poisoner is told to
// poison itself. A late use then fails loudly, and its reads race with
// the poisoning writes, which the race detector reports.

// PoisonMethod is the method a request reads once its handler has
// returned, in builds that poison finished states (-race).
const PoisonMethod = "USED-AFTER-HANDLER-RETURNED"

// Poisoner is a scratch value that can make itself unusable: under -race
// the server poisons a finished request's scratch instead of handing it
// to the next request.
type Poisoner interface{ Poison() }

// Scratch returns the request's slot for the handler's own per-request
// state: it holds what the handler put there for an earlier request
// served with the same state (nil at first), so a handler can reuse its
// allocation. What it holds must obey the request's rule: no use once
// the handler has returned.
func (w *response) Scratch() *any { return &w.rs.scratch }

func (s *Server) getState() *reqState {
	if rs, ok := s.states.Get().(*reqState); ok {
		return rs
	}
	return new(reqState)
}

// putState gives back a finished request's state: to the pool, or
// poisoned to the collector (raceBuild, s.poison).
func (s *Server) putState(rs *reqState) {
	if raceBuild || s.poison {
		if rs.bw != nil { // the connection's, not the request's: reused
			s.putWriter(rs.bw)
		}
		poisonState(rs)
		return
	}
	s.states.Put(rs)
}

func poisonState(rs *reqState) {
	rs.url = url.URL{Path: "/" + PoisonMethod}
	rs.req = http.Request{Method: PoisonMethod, URL: &rs.url}
	rs.hdr = nil
	rs.bw = nil
	rs.listed = -1
	rs.w = response{} // every method dereferences w.c or w.rs: nil panics
	if p, ok := rs.scratch.(Poisoner); ok {
		p.Poison()
	}
}
