package pd

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/infergate/infergate/spec"
)

// TestMoRIPairConcurrent: concurrent dispatch is a WRITE decode's choice;
// a READ pair labelled concurrent is refused, and under it the decode dials
// the prefill's side channel, so a loopback prefill channel with a remote
// decode is refused too (sequentially it is fine: only the prefill dials).
func TestMoRIPairConcurrent(t *testing.T) {
	ep := func(ip string, labels ...string) spec.Endpoint {
		l := map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			l[labels[i]] = labels[i+1]
		}
		return spec.Endpoint{ID: ip, Addr: netip.AddrPortFrom(netip.MustParseAddr(ip), 8000), PairFacts: map[string]string{spec.FactKVConnector: connectorMoRIIO}, Labels: l}
	}
	tests := []struct {
		name       string
		p, d       spec.Endpoint
		reason     string // "" = pairs
		concurrent bool
	}{
		{"write concurrent", ep("10.0.0.1", "moriio_mode", "write"), ep("10.0.0.2", "moriio_mode", "write", "moriio_write_dispatch", "concurrent"), "", true},
		{"write sequential", ep("10.0.0.1", "moriio_mode", "write"), ep("10.0.0.2", "moriio_mode", "write", "moriio_write_dispatch", "sequential"), "", false},
		{"prefill label does not decide", ep("10.0.0.1", "moriio_mode", "write", "moriio_write_dispatch", "concurrent"), ep("10.0.0.2", "moriio_mode", "write"), "", false},
		{"read concurrent", ep("10.0.0.1", "moriio_mode", "read"), ep("10.0.0.2", "moriio_mode", "read", "moriio_write_dispatch", "concurrent"), "needs write mode", false},
		{"concurrent, loopback prefill", ep("127.0.0.1", "moriio_mode", "write"), ep("10.0.0.2", "moriio_mode", "write", "moriio_write_dispatch", "concurrent"), "notify itself", false},
		{"sequential, loopback prefill", ep("127.0.0.1", "moriio_mode", "write"), ep("10.0.0.2", "moriio_mode", "write"), "", false},
		{"concurrent, both loopback", ep("127.0.0.2", "moriio_mode", "write"), ep("127.0.0.3", "moriio_mode", "write", "moriio_write_dispatch", "concurrent"), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ds, err := moriPair(tc.p, tc.d, nil)
			switch {
			case tc.reason == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.reason != "" && (err == nil || !strings.Contains(err.Error(), tc.reason)):
				t.Fatalf("err = %v, want one mentioning %q", err, tc.reason)
			case err == nil && ds.concurrent != tc.concurrent:
				t.Errorf("concurrent = %v, want %v", ds.concurrent, tc.concurrent)
			}
		})
	}
}

// TestMoRIConcurrentHandoff: a concurrent prefill's handoff must also
// report the ports the decode was told (the prefill's labels), as a number
// or a decimal string.
func TestMoRIConcurrentHandoff(t *testing.T) {
	ps := moriSide{host: "10.0.0.1", handshake: 6301, notify: 61005}
	const head = `{"kv_transfer_params":{"transfer_id":"xfer-1","remote_engine_id":"e","remote_block_ids":[1],"remote_host":"10.0.0.1",`
	tests := []struct{ name, body, field string }{
		{"as told", head + `"remote_handshake_port":6301,"remote_notify_port":61005}}`, ""},
		{"as told, strings", head + `"remote_handshake_port":"6301","remote_notify_port":"61005"}}`, ""},
		{"another handshake port", head + `"remote_handshake_port":6302,"remote_notify_port":61005}}`, "remote_handshake_port"},
		{"another notify port", head + `"remote_handshake_port":6301,"remote_notify_port":61006}}`, "remote_notify_port"},
		{"another transfer", `{"kv_transfer_params":{"transfer_id":"xfer-2"}}`, "transfer_id"},
		{"the rank told", head + `"remote_handshake_port":6301,"remote_notify_port":61005,"remote_dp_rank":3}}`, ""},
		{"another rank", head + `"remote_handshake_port":6301,"remote_notify_port":61005,"remote_dp_rank":1}}`, "remote_dp_rank"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := moriConcurrentHandoff([]byte(tc.body), "xfer-1", ps, moriRank{rank: 3, pinned: true})
			var he *HandoffError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.field != "" && (!errors.As(err, &he) || he.Field != fieldKVTransferParams+"."+tc.field):
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}
