package pdfake

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The admin endpoints let out-of-process tests (the pdfake binary) drive
// what Inject, SetFinishReason and Records do in process. They are on the
// engine's own port: fakes only ever listen on test addresses.

// serveInject: POST /admin/inject?fault=<fault>&n=<count> (n defaults to 1).
func (e *Engine) serveInject(w http.ResponseWriter, r *http.Request) {
	f := Fault(r.URL.Query().Get("fault"))
	known := false
	for _, k := range AllFaults() {
		known = known || k == f
	}
	if !known {
		http.Error(w, "unknown fault "+strconv.Quote(string(f)), http.StatusBadRequest)
		return
	}
	n := 1
	if s := r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 1000 {
			http.Error(w, "n must be 1..1000", http.StatusBadRequest)
			return
		}
		n = v
	}
	e.Inject(f, n)
	w.WriteHeader(http.StatusNoContent)
}

// serveFinishReason: POST /admin/finish-reason?value=stop ("" restores length).
func (e *Engine) serveFinishReason(w http.ResponseWriter, r *http.Request) {
	e.SetFinishReason(r.URL.Query().Get("value"))
	w.WriteHeader(http.StatusNoContent)
}

// recordJSON is a Record on the admin wire (body as a string).
type recordJSON struct {
	Method    string      `json:"method"`
	Path      string      `json:"path"`
	Header    http.Header `json:"header"`
	Body      string      `json:"body"`
	Fault     Fault       `json:"fault,omitempty"`
	Violation string      `json:"violation,omitempty"`
	Cancelled bool        `json:"cancelled"`
	Done      bool        `json:"done"`
}

// serveRecords: GET /admin/records returns every recorded request.
func (e *Engine) serveRecords(w http.ResponseWriter, _ *http.Request) {
	recs := e.Records()
	out := make([]recordJSON, len(recs))
	for i, r := range recs {
		out[i] = recordJSON{r.Method, r.Path, r.Header, string(r.Body), r.Fault, r.Violation, r.Cancelled, r.Done}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
