package api

import (
	"strings"

	"github.com/infergate/infergate/apierror"
)

// storeHealth is implemented by rule stores shared between replicas: why
// the shared store cannot be reached, nil when it can.
type storeHealth interface{ StoreHealth() error }

// keyStoreHealth is implemented by key stores shared between replicas
// (tenant.Registry): why the shared key document is not in force, "" when
// it is.
type keyStoreHealth interface{ SharedProblem() string }

// booted reports whether boot (replay, then rule files) has finished; both
// readiness probes answer 503 before.
func (s *Server) booted() bool { return s.store.Ready() && (s.boot == nil || s.boot()) }

// degradation says what a ready daemon serves in a degraded way: each part
// a short name for the status line, with the full reasons beside it. A
// degraded daemon stays in rotation (it serves its last rules and keys);
// the status tells operators and load balancers why it is not whole.
type degradation struct {
	parts   []string // "store unreachable", "API-key store unreadable"
	reasons []string
}

// status is the /readyz status line of a degraded daemon.
func (d degradation) status() string { return "degraded: " + strings.Join(d.parts, ", ") }

// degraded collects what is degraded now.
func (s *Server) degraded() degradation {
	var d degradation
	if h, ok := s.store.(storeHealth); ok {
		if err := h.StoreHealth(); err != nil {
			d.parts = append(d.parts, "store unreachable")
			d.reasons = append(d.reasons, "rule store: "+err.Error())
		}
	}
	if h, ok := s.keys.(keyStoreHealth); ok {
		if p := h.SharedProblem(); p != "" {
			d.parts = append(d.parts, "API-key store unreadable")
			d.reasons = append(d.reasons, "API-key store: "+p)
		}
	}
	return d
}

// notBooted is the boot gate's 503 not_ready (on /readyz and on writes).
// While a shared rule store holds boot up (not reached yet, login refused)
// the message says so, so the operator sees why the replica is not ready.
func (s *Server) notBooted() *apierror.Error {
	e := notReady()
	if h, ok := s.store.(storeHealth); ok {
		if err := h.StoreHealth(); err != nil {
			e.Message += "; rule store: " + err.Error()
		}
	}
	return e
}
