package api

import "strings"

// keyStoreHealth is implemented by key stores shared between replicas
// (tenant.Registry): why the shared key document is not in force, "" when
// it is.
type keyStoreHealth interface{ SharedProblem() string }

// degradation says what a ready daemon serves in a degraded way: each part
// a short name for the status line, with the full reasons beside it. A
// degraded daemon stays in rotation (it serves its last rules and keys);
// the status tells operators and load balancers why it is not whole.
type degradation struct {
	parts   []string // "store unreachable", "API-key store unreadable"
	reasons []string
}

func (d degradation) status() string {
	if len(d.parts) == 0 {
		return "ready"
	}
	return "degraded: " + strings.Join(d.parts, ", ")
}

// degraded collects what is degraded now.
func (s *Server) degraded() degradation {
	var d degradation
	if h, ok := s.store.(interface{ StoreHealth() error }); ok {
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
