package datapath

import (
	"net/http"
	"time"
)

// ttftWriter notes when the first body byte of a successful P/D answer
// reaches the client, for infergate_pd_client_ttft_seconds: the wait a
// client sees (queueing, prefill, KV transfer, decode's first token and
// every retry in between), which the per-leg histograms only add up to
// when nothing went wrong.
type ttftWriter struct {
	http.ResponseWriter
	status int
	first  time.Time // zero until a 2xx body byte was written
}

func (w *ttftWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *ttftWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	if n > 0 && w.first.IsZero() && w.status >= 200 && w.status < 300 {
		w.first = time.Now()
	}
	return n, err
}

func (w *ttftWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *ttftWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observeClientTTFT records the client's wait for a request that got a
// successful body; errors and empty answers have no first token.
func (rt *Runtime) observeClientTTFT(c *compiled, model string, arrival time.Time, w *ttftWriter) {
	if w.first.IsZero() || rt.pdm == nil || rt.pdm.ClientTTFT == nil {
		return
	}
	rt.pdm.ClientTTFT.WithLabelValues(c.label, model).Observe(w.first.Sub(arrival).Seconds())
}
