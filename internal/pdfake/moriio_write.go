package pdfake

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// MoRI-IO WRITE mode as the engines run it: the decode, given the prefill's
// side channel (remote_host, remote_notify_port) and a transfer_id,
// allocates blocks and notifies the prefill; the prefill, given the
// decode's side channel on its own leg, pushes the KV for that transfer
// into those blocks; the decode answers only once the push arrived. The
// side channels are RDMA and ZMQ, not HTTP, so fakes in one test share a
// MoRIIOFabric that stands in for them: a decode whose notify names the
// wrong prefill, or a prefill told the wrong decode, never gets its push
// and the decode records a violation after RendezvousTimeout, as the real
// one would hang.

// MoRIIOFabric is the side-channel network of a set of MoRI-IO WRITE
// fakes (Config.MoRIIOFabric). Its zero value is not usable: NewMoRIIOFabric.
type MoRIIOFabric struct {
	// HoldPrefill makes a prefill answer its leg only after the decode of
	// its transfer has notified it (bounded by RendezvousTimeout, then a
	// violation): a test instrument that proves both legs were in flight
	// at once, since a sequential dispatch sends the decode only after the
	// prefill answered.
	HoldPrefill bool
	// PrefillDelay is a WRITE prefill's forward pass: the leg waits this
	// long before it computes (and pushes) its transfer, so a decode
	// waiting for the push sends its first byte no sooner.
	PrefillDelay time.Duration

	mu     sync.Mutex
	xfers  map[string]*moriXfer
	events []string
}

// moriXfer is one transfer id's state on the fabric. A side channel is
// host:port#dp<rank>: each DP rank of an engine listens on its own ports.
type moriXfer struct {
	prefillFrom, prefillTo string // the prefill rank's side channel, and the decode's it was told
	toldDPSize             int    // the decode DP size the prefill was told (it handshakes that many ranks)
	decodeAt, decodeNotify string // the decode's side channel, and the prefill rank's it notified
	decodeRank             int    // the decode rank that notified
	notified, pushed       chan struct{}
	prefilled, notifiedSet bool
	pushedSet              bool
}

// NewMoRIIOFabric is an empty fabric.
func NewMoRIIOFabric() *MoRIIOFabric { return &MoRIIOFabric{xfers: map[string]*moriXfer{}} }

// Events is what happened on the fabric, in order: "notify <tid>" when a
// decode notified its prefill, "prefill <tid>" when a prefill leg for the
// transfer arrived, "push <tid>" when the KV reached the decode.
func (f *MoRIIOFabric) Events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

// xfer is tid's state, created on first use; f.mu is held.
func (f *MoRIIOFabric) xfer(tid string) *moriXfer {
	x := f.xfers[tid]
	if x == nil {
		x = &moriXfer{notified: make(chan struct{}), pushed: make(chan struct{})}
		f.xfers[tid] = x
	}
	return x
}

// maybePush pushes tid's KV once the prefill ran and the decode notified,
// when each named the other; f.mu is held.
func (f *MoRIIOFabric) maybePush(tid string, x *moriXfer) {
	if x.pushedSet || !x.prefilled || !x.notifiedSet || x.prefillTo != x.decodeAt || x.decodeNotify != x.prefillFrom || x.decodeRank >= x.toldDPSize {
		return
	}
	x.pushedSet = true
	close(x.pushed)
	f.events = append(f.events, "push "+tid)
}

// prefillRan records a prefill leg for tid from side channel from, told to
// push to the decode side channel to, which runs dpSize ranks; it returns
// tid's notify signal.
func (f *MoRIIOFabric) prefillRan(tid, from, to string, dpSize int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.xfer(tid)
	x.prefilled, x.prefillFrom, x.prefillTo, x.toldDPSize = true, from, to, dpSize
	f.events = append(f.events, "prefill "+tid)
	f.maybePush(tid, x)
	return x.notified
}

// decodeNotified records rank rank of a decode at side channel at that
// notified the prefill side channel prefill for tid; it returns tid's push
// signal.
func (f *MoRIIOFabric) decodeNotified(tid, at, prefill string, rank int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.xfer(tid)
	if !x.notifiedSet {
		x.notifiedSet = true
		close(x.notified)
	}
	x.decodeAt, x.decodeNotify, x.decodeRank = at, prefill, rank
	f.events = append(f.events, "notify "+tid)
	f.maybePush(tid, x)
	return x.pushed
}

// moriSideChannel is an engine's own side channel as a peer names it.
func (e *Engine) moriSideChannel() string {
	return net.JoinHostPort(e.remoteHost(), strconv.Itoa(moriHandshakePort))
}

// peerChannel is the side channel a leg's params name: remote_host and
// remote_handshake_port (a number or a decimal string).
func peerChannel(kv *connectorKV) string {
	var port json.Number
	if err := json.Unmarshal(unquote(kv.RemoteHandshakePort), &port); err != nil {
		return ""
	}
	return net.JoinHostPort(kv.RemoteHost, port.String())
}

// rankChannel is rank's side channel at channel.
func rankChannel(channel string, rank int) string { return channel + "#dp" + strconv.Itoa(rank) }

// kvInt is an integer field of the params (a number or a decimal string),
// def when absent or null.
func kvInt(v json.RawMessage, def int) int {
	var n json.Number
	if len(v) == 0 || string(v) == "null" || json.Unmarshal(unquote(v), &n) != nil {
		return def
	}
	i, err := n.Int64()
	if err != nil {
		return def
	}
	return int(i)
}

// unquote strips the quotes of a decimal string port.
func unquote(v json.RawMessage) json.RawMessage {
	if len(v) >= 2 && v[0] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// moriWritePrefill is a WRITE prefill leg on a fabric: it is marked as
// computed for the transfer, told to push to the decode its params name,
// and (HoldPrefill) answers once that decode has notified. false: the
// client went away first (recorded as Cancelled; nothing to answer).
func (x *exchange) moriWritePrefill(kv *connectorKV, rank int) bool {
	f := x.e.cfg.MoRIIOFabric
	if f.PrefillDelay > 0 {
		select {
		case <-time.After(f.PrefillDelay):
		case <-x.r.Context().Done():
			x.e.update(func() { x.rec.Cancelled = true })
			return false
		case <-x.e.stop:
			return false
		}
	}
	notified := f.prefillRan(kv.TransferID, rankChannel(x.e.moriSideChannel(), rank), peerChannel(kv), kvInt(kv.RemoteDPSize, 1))
	if !f.HoldPrefill {
		return true
	}
	select {
	case <-notified:
	case <-x.r.Context().Done():
		x.e.update(func() { x.rec.Cancelled = true })
		return false
	case <-x.e.stop:
		return false
	case <-time.After(x.e.cfg.RendezvousTimeout):
		x.setViolation("moriio write prefill: no decode notified transfer " + kv.TransferID + " while the prefill ran")
	}
	return true
}

// moriWriteDecode is a WRITE decode leg on a fabric: it needs the transfer
// id and the prefill's side channel (remote_host, remote_handshake_port,
// remote_notify_port), notifies that prefill and answers only once the
// push arrived. false: the leg was answered (rejected) or abandoned.
func (x *exchange) moriWriteDecode(kv *connectorKV) bool {
	if kv == nil || kv.DoRemotePrefill == nil || !*kv.DoRemotePrefill || kv.TransferID == "" || kv.RemoteHost == "" || len(kv.RemoteNotifyPort) == 0 || len(kv.RemoteHandshakePort) == 0 {
		x.setViolation("moriio write decode without do_remote_prefill, a transfer_id and the prefill's side channel (it never recomputes)")
		return true
	}
	pushed := x.e.cfg.MoRIIOFabric.decodeNotified(kv.TransferID, x.e.moriSideChannel(), rankChannel(peerChannel(kv), kvInt(kv.RemoteDPRank, 0)), x.e.decodeRank())
	select {
	case <-pushed:
		return true
	case <-x.r.Context().Done():
		x.e.update(func() { x.rec.Cancelled = true })
	case <-x.e.stop:
	case <-time.After(x.e.cfg.RendezvousTimeout):
		x.reject(http.StatusGatewayTimeout, fmt.Sprintf("moriio write decode: no KV push for transfer %s from %s", kv.TransferID, peerChannel(kv)))
	}
	return false
}

// decodeRank is the rank a decode's API server runs a request on: its own
// balancer's (round robin) under DP, else 0.
func (e *Engine) decodeRank() int {
	if e.cfg.DPSize <= 1 {
		return 0
	}
	e.dp.mu.Lock()
	defer e.dp.mu.Unlock()
	r := e.dp.next % e.cfg.DPSize
	e.dp.next++
	return r
}
