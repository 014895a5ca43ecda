package pd

import (
	"github.com/infergate/infergate/metrics"
)

// Values of the phase and status labels of loxilb_ai_pd_requests_total.
const (
	labelComplete     = "complete"
	statusSuccess     = "success"
	statusError       = "error"
	statusTimeout     = "timeout"
	statusRelayed     = "relayed"
	statusClientClose = "client_closed"
)

// Record updates the P/D metrics from one Outcome. Dialects never touch
// metrics themselves so Serve stays a pure function of its inputs; the
// datapath calls Record once per request with the request's bounded model
// label (ModelLabels) and the rule's metrics label (its name, else its key,
// as on every other family: an unnamed rule must not share the empty label
// with every other unnamed rule). m may be nil.
func Record(m *metrics.PD, name, model string, o Outcome) {
	if m == nil {
		return
	}
	phase, status := outcomeLabels(o)
	m.Requests.WithLabelValues(name, model, phase, status).Inc()
	if o.RoomRetry {
		m.RoomRetries.WithLabelValues(name).Inc()
	}
	if o.EarlyExit {
		m.TRTEarlyExits.WithLabelValues(name).Inc()
	}
	if o.KVTransferFailed {
		m.KVTransferFailures.WithLabelValues(name).Inc()
	}
	if o.HandoffInvalid {
		m.HandoffInvalid.WithLabelValues(name).Inc()
	}
	if o.Connector != "" {
		m.KVConnector.WithLabelValues(name, o.Connector).Inc()
	}
	if o.PrefillFailover {
		m.Failovers.WithLabelValues(name).Inc()
	}
	if o.DecodeFailover {
		m.DecodeFailovers.WithLabelValues(name).Inc()
	}
	sawDecode := false
	for _, l := range o.Legs {
		if !l.NotSent && !l.Died {
			if l.Phase == PhaseDecode {
				sawDecode = true
			}
			continue
		}
		if l.Phase == PhasePrefill {
			m.PrefillDeaths.WithLabelValues(name).Inc()
		} else {
			sawDecode = true
			m.DecodeDeaths.WithLabelValues(name).Inc()
		}
	}
	if o.Prefill > 0 {
		m.PrefillDuration.WithLabelValues(name).Observe(o.Prefill.Seconds())
	}
	if sawDecode && o.DecodeTTFB > 0 {
		m.DecodeTTFB.WithLabelValues(name).Observe(o.DecodeTTFB.Seconds())
	}
	m.Duration.WithLabelValues(name).Observe(o.Total.Seconds())
}

// outcomeLabels maps an Outcome to (phase, status) labels.
func outcomeLabels(o Outcome) (phase, status string) {
	switch {
	case o.ClientGone:
		return string(orPhase(o.FailedPhase)), statusClientClose
	case o.Relayed:
		return string(orPhase(o.FailedPhase)), statusRelayed
	case o.Code == CodePrefillTimeout || o.Code == CodeDecodeTimeout || o.Code == CodePoolTimeout:
		return string(o.FailedPhase), statusTimeout
	case o.Code != "":
		return string(o.FailedPhase), statusError
	case o.StreamCut:
		return string(PhaseDecode), statusError
	}
	return labelComplete, statusSuccess
}

func orPhase(p Phase) Phase {
	if p == "" {
		return PhaseDecode
	}
	return p
}
