package pd

import (
	"time"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
)

// Phase names a leg of a P/D sequence.
type Phase string

const (
	PhasePrefill Phase = "prefill" // vLLM prefill, SGLang prefill, TRT-LLM context
	PhaseDecode  Phase = "decode"  // vLLM/SGLang decode, TRT-LLM generation
)

// LegResult is what happened to one upstream request. The datapath feeds its
// breaker from it: NotSent is a connect failure, Died a post-connect transport
// failure, Status ≥ 500 an origin error.
type LegResult struct {
	Phase    Phase
	Endpoint spec.Endpoint
	Status   int   // engine HTTP status; 0 when no response arrived
	Err      error // transport or timeout error; nil when the engine answered
	// NotSent: the engine provably never received the request (dial failure).
	NotSent bool
	// Died: the connection failed after the request was sent, before the
	// response completed.
	Died bool
	// Cancelled: infergate cancelled the leg (sibling failed, client left,
	// timeout). Not the engine's fault unless TimedOut.
	Cancelled bool
	TimedOut  bool
	// PoolWait: the leg waited for a free connection at its endpoint's
	// cap and never got one (poolwait.go): nothing was sent, and the
	// breaker is not fed.
	PoolWait bool
	Duration time.Duration // dispatch → response complete (prefill) or first byte (decode)
}

// Outcome reports one Serve call. Status and Code are what the client got
// (Code empty on success, including relayed engine errors).
type Outcome struct {
	Engine spec.Engine
	Status int
	Code   string
	// FailedPhase is the phase that decided a failure ("" on success).
	FailedPhase Phase
	Legs        []LegResult

	Prefill    time.Duration // prefill dispatch → prefill response complete
	DecodeTTFB time.Duration // decode dispatch → first decode byte
	Total      time.Duration

	// KVTransferFailed: decode ran without transfer params and recomputed
	// the prefill (prefill failed twice, or answered without params).
	KVTransferFailed bool
	// HandoffInvalid: the prefill answered with transfer parameters a
	// decode could not use (CodeHandoffInvalid); no decode leg was sent.
	HandoffInvalid  bool
	PrefillFailover bool // the one prefill retry (vLLM/TRT) was used
	DecodeFailover  bool // a decode leg was re-sent to another decode after a connect failure
	RoomRetry       bool // the SGLang pair retry with a fresh room was used
	EarlyExit       bool // TRT-LLM context finished the request
	Relayed         bool // an engine's error response was relayed verbatim
	ClientGone      bool // the client disconnected before the response completed
	StreamCut       bool // decode died after bytes were relayed
	IdleTimeout     bool // decode went silent and the relay was ended
	// PrefillSkipped names the request shape (Shape…) for which vLLM sent no
	// prefill leg and let decode compute the prompt; "" otherwise.
	PrefillSkipped string
	// ClientTransferFields is how many client transfer fields (kv_transfer_params,
	// bootstrap_*, disaggregated_params) the legs dropped or replaced.
	ClientTransferFields int
	// DecodeUnreachable: no decode could be reached and Pair.Unsplit was
	// set; nothing was written, the datapath answers.
	DecodeUnreachable bool
	// Connector names the vLLM connector sequence the request ran (nixl,
	// ConnectorMooncake, moriio); "" for other engines.
	Connector string
}

// ConnectorMooncake is Outcome.Connector of the Mooncake sequence.
const ConnectorMooncake = "mooncake"

func (o *Outcome) leg(r LegResult) { o.Legs = append(o.Legs, r) }

// legFor builds a LegResult from a transport error.
func legFor(p Phase, ep spec.Endpoint, status int, err error, d time.Duration) LegResult {
	r := LegResult{Phase: p, Endpoint: ep, Status: status, Err: err, Duration: d}
	if err != nil {
		switch {
		case poolWaited(err):
			r.PoolWait = true
		case upstream.NotSent(err):
			r.NotSent = true
		default:
			r.Died = true
		}
	}
	return r
}
