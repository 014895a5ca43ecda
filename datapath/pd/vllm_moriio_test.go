package pd

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/infergate/infergate/spec"
)

func TestCheckMoRIIOParams(t *testing.T) {
	const tid = "xfer-1"
	const base = `"transfer_id":"xfer-1","remote_engine_id":"10.0.0.2:6301","remote_block_ids":[1,2],"remote_host":"10.0.0.2"`
	tests := []struct {
		name, params string
		field        string // "" = valid
	}{
		{"as vLLM sends it", `{"do_remote_prefill":true,"do_remote_decode":false,` + base + `,"remote_handshake_port":6301,"remote_notify_port":61005,"remote_dp_size":1,"tp_size":8,"remote_hosts":["10.0.0.2"],"prefill_complete_ts":1.5}`, ""},
		{"ports and counts as decimal strings", `{` + base + `,"remote_handshake_port":"6301","remote_notify_port":"61005","remote_dp_size":"1","remote_dp_rank":"0"}`, ""},
		{"null counts", `{` + base + `,"remote_handshake_port":6301,"remote_notify_port":61005,"remote_tp_size":null}`, ""},
		{"another transfer", `{"transfer_id":"xfer-2","remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_handshake_port":1,"remote_notify_port":2}`, "transfer_id"},
		{"transfer id not a string", `{"transfer_id":1,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_handshake_port":1,"remote_notify_port":2}`, "transfer_id"},
		{"no transfer id", `{"remote_engine_id":"e"}`, "transfer_id"},
		{"empty engine id", `{"transfer_id":"xfer-1","remote_engine_id":"","remote_block_ids":[1],"remote_host":"h","remote_handshake_port":1,"remote_notify_port":2}`, "remote_engine_id"},
		{"string block id", `{"transfer_id":"xfer-1","remote_engine_id":"e","remote_block_ids":["1"],"remote_host":"h","remote_handshake_port":1,"remote_notify_port":2}`, "remote_block_ids[0]"},
		{"no host", `{"transfer_id":"xfer-1","remote_engine_id":"e","remote_block_ids":[1],"remote_handshake_port":1,"remote_notify_port":2}`, "remote_host"},
		{"host with a space", `{"transfer_id":"xfer-1","remote_engine_id":"e","remote_block_ids":[1],"remote_host":"a b","remote_handshake_port":1,"remote_notify_port":2}`, "remote_host"},
		{"zero port", `{` + base + `,"remote_handshake_port":0,"remote_notify_port":2}`, "remote_handshake_port"},
		{"no notify port", `{` + base + `,"remote_handshake_port":1}`, "remote_notify_port"},
		{"port as a word", `{` + base + `,"remote_handshake_port":1,"remote_notify_port":"x"}`, "remote_notify_port"},
		{"fractional count", `{` + base + `,"remote_handshake_port":1,"remote_notify_port":2,"tp_size":1.5}`, "tp_size"},
		{"signed decimal string", `{` + base + `,"remote_handshake_port":1,"remote_notify_port":2,"remote_dp_rank":"-1"}`, "remote_dp_rank"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMoRIIOParams([]byte(tc.params), tid)
			var he *HandoffError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("refused a valid handoff: %v", err)
			case tc.field != "" && !errors.As(err, &he):
				t.Fatalf("err = %v, want a HandoffError naming %s", err, tc.field)
			case tc.field != "" && he.Field != fieldKVTransferParams+"."+tc.field:
				t.Errorf("field = %s, want kv_transfer_params.%s", he.Field, tc.field)
			}
		})
	}
}

func TestMoRIPair(t *testing.T) {
	ep := func(id, ip string, labels ...string) spec.Endpoint {
		l := map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			l[labels[i]] = labels[i+1]
		}
		ap := netip.AddrPortFrom(netip.MustParseAddr(ip), 8000)
		return spec.Endpoint{ID: id, Addr: ap, PairFacts: map[string]string{spec.FactKVConnector: connectorMoRIIO}, Labels: l}
	}
	dp2 := &spec.Rule{KV: &spec.KV{DPRanks: 2}}
	tests := []struct {
		name   string
		p, d   spec.Endpoint
		rule   *spec.Rule
		reason string // "" = pairs
	}{
		{"read, remote hosts", ep("p", "10.0.0.1", "moriio_mode", "read"), ep("d", "10.0.0.2", "moriio_mode", "read"), nil, ""},
		{"write, remote hosts", ep("p", "10.0.0.1", "moriio_mode", "write"), ep("d", "10.0.0.2", "moriio_mode", "WRITE"), nil, ""},
		{"write, both loopback", ep("p", "127.0.0.2", "moriio_mode", "write"), ep("d", "127.0.0.3", "moriio_mode", "write"), nil, ""},
		{"write, loopback decode", ep("p", "10.0.0.1", "moriio_mode", "write"), ep("d", "127.0.0.1", "moriio_mode", "write"), nil, "loopback"},
		{"write, localhost label", ep("p", "10.0.0.1", "moriio_mode", "write"), ep("d", "10.0.0.2", "moriio_mode", "write", "moriio_host", "localhost"), nil, "loopback"},
		{"write, unspecified label", ep("p", "10.0.0.1", "moriio_mode", "write"), ep("d", "10.0.0.2", "moriio_mode", "write", "moriio_host", "[::]"), nil, "loopback"},
		{"write, the prefill's own channel", ep("p", "10.0.0.1", "moriio_mode", "write"), ep("d", "10.0.0.2", "moriio_mode", "write", "moriio_host", "10.0.0.1"), nil, "own"},
		{"read, loopback decode", ep("p", "10.0.0.1", "moriio_mode", "read"), ep("d", "127.0.0.1", "moriio_mode", "read"), nil, ""},
		{"modes differ", ep("p", "10.0.0.1", "moriio_mode", "read"), ep("d", "10.0.0.2", "moriio_mode", "write"), nil, "mode"},
		{"rule DP 2", ep("p", "10.0.0.1", "moriio_mode", "read"), ep("d", "10.0.0.2", "moriio_mode", "read"), dp2, ""},
		{"dp not a number", ep("p", "10.0.0.1", "moriio_mode", "read", "dp_size", "x"), ep("d", "10.0.0.2", "moriio_mode", "read"), nil, "dp_size"},
		{"dp 0", ep("p", "10.0.0.1", "moriio_mode", "read"), ep("d", "10.0.0.2", "moriio_mode", "read", "dp_size", "0"), nil, "dp_size"},
		{"write, one host, rank ports meet", ep("p", "10.0.0.1", "moriio_mode", "write", "dp_size", "4"), ep("d", "10.0.0.2", "moriio_mode", "write", "moriio_host", "10.0.0.1", "moriio_handshake_port", "6304"), nil, "own"},
		{"write, one host, rank ports apart", ep("p", "10.0.0.1", "moriio_mode", "write", "dp_size", "4"), ep("d", "10.0.0.2", "moriio_mode", "write", "moriio_host", "10.0.0.1", "moriio_handshake_port", "6305"), nil, ""},
		{"tp not a number", ep("p", "10.0.0.1", "moriio_mode", "read"), ep("d", "10.0.0.2", "moriio_mode", "read", "tp_size", "x"), nil, "tp_size"},
		{"unknown dispatch", ep("p", "10.0.0.1", "moriio_mode", "read"), ep("d", "10.0.0.2", "moriio_mode", "read", "moriio_write_dispatch", "eager"), nil, "moriio_write_dispatch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := moriPair(tc.p, tc.d, tc.rule)
			switch {
			case tc.reason == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.reason != "" && (err == nil || !strings.Contains(err.Error(), tc.reason)):
				t.Fatalf("err = %v, want one mentioning %q", err, tc.reason)
			}
		})
	}
}

func TestVLLMConnectorChoice(t *testing.T) {
	with := func(c string) spec.Endpoint {
		if c == "" {
			return spec.Endpoint{}
		}
		return spec.Endpoint{PairFacts: map[string]string{spec.FactKVConnector: c}}
	}
	tests := []struct {
		prefill, decode string
		want            connector
	}{
		{"", "", connNIXL},
		{"NixlConnector", "NixlConnector", connNIXL},
		{"MooncakeConnector", "", connMooncake},
		{"", "mooncakeconnector", connMooncake},
		{"NixlConnector", "MoRIIOConnector", connMoRIIO},
		{"MoRIIOConnector", "", connMoRIIO},
		{"LMCacheConnectorV1", "", connNIXL},
	}
	for _, tc := range tests {
		if got := vllmConnector(Pair{Prefill: with(tc.prefill), Decode: with(tc.decode)}); got != tc.want {
			t.Errorf("prefill %q decode %q: %v, want %v", tc.prefill, tc.decode, got, tc.want)
		}
	}
}
