package pd

import (
	"errors"
	"net/http"

	"github.com/infergate/infergate/datapath/upstream"
)

// CodePoolTimeout (504): every connection to a leg's engine stayed busy (at
// the endpoint's connection cap, --max-engine-conns-per-endpoint) for the
// leg's whole bound, so the leg was never sent. The single pool answers the
// same bound with the same code.
const CodePoolTimeout = "upstream_pool_timeout"

// Why a leg's pool wait is told apart from its timeout: each P/D leg runs
// under its phase bound (PrefillTimeout, DecodeTimeout, SGLang's rendezvous
// window), and a wait for a free connection at the endpoint's cap spends
// that same bound, as a single-pool request's wait spends its first-byte
// timeout. When the bound passes during the wait nothing reached the
// engine, so the client learns which bound it met (CodePoolTimeout, not the
// phase's timeout) and the breaker is not fed: a full pool is the gateway's
// own limit, not an engine failure.
//
// The legs keep their bound on the context rather than in
// upstream.Leg.HeaderWait: HeaderWait also leaves a deadline on the
// connection, which would cut a decode relay (or an SGLang prefill body read
// while its decode streams) at the first-byte bound.

// poolWaited reports whether err ended a leg while it waited for a free
// connection to its endpoint (an *upstream.PoolWaitError): nothing was sent.
func poolWaited(err error) bool {
	var pw *upstream.PoolWaitError
	return errors.As(err, &pw)
}

// failPoolWait answers a leg whose bound passed while it waited for a
// connection.
func (q *seq) failPoolWait(phase Phase) {
	q.fail(phase, http.StatusGatewayTimeout, CodePoolTimeout,
		"every connection to the "+string(phase)+" engine stayed busy for the "+string(phase)+" timeout; the request was not sent")
}

// sgWindowFailed answers an SGLang pair whose rendezvous window passed: 504
// CodePoolTimeout when a leg was still waiting for a connection (its
// sibling's silence is then the gateway's doing too, so the caller feeds
// neither leg as a timeout), else 504 CodePrefillTimeout.
func (q sgSeq) sgWindowFailed(pl, dl *LegResult) {
	switch {
	case pl.PoolWait:
		q.failPoolWait(PhasePrefill)
	case dl.PoolWait:
		q.failPoolWait(PhaseDecode)
	default:
		q.fail(PhasePrefill, http.StatusGatewayTimeout, CodePrefillTimeout, "prefill/decode rendezvous did not complete in time")
	}
}
