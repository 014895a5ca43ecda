package cli

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/rules/store/etcdstore"
)

// TestWriteEngines: every registration's pairing key, bootstrap port and
// labels are shown, "-" when it advertises none.
func TestWriteEngines(t *testing.T) {
	list := []etcdstore.EngineEntry{
		{Key: "10.0.0.1:8000", Registration: etcdstore.Registration{Role: "prefill", Engine: "vllm", Model: "m", BlockSize: 16, KVConnector: "NixlConnector"}},
		{Key: "10.0.0.4:8000", Registration: etcdstore.Registration{Role: "prefill", Engine: "vllm", Model: "m", KVConnector: "MooncakeConnector",
			BootstrapPort: 8999, Labels: map[string]string{"zone": "a", "kv_engine_id": "e-1"}}},
		{Key: "10.0.0.2:8000", Registration: etcdstore.Registration{Role: "decode", Engine: "vllm", Model: "m", PairingProtocol: "p1", KVCacheDtype: "fp8"}},
		{Key: "10.0.0.3:8000", Registration: etcdstore.Registration{Role: "decode", Engine: "vllm", Model: "m"}, Refused: "model: missing"},
	}
	var b strings.Builder
	if err := writeEngines(&b, list); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := [][]string{
		{"ENGINE", "ROLE", "KIND", "MODEL", "PAIRING", "BOOTSTRAP", "LABELS", "STATE"},
		{"10.0.0.1:8000", "prefill", "vllm", "m", "block_size=16,kv_connector=NixlConnector", "-", "-", "ok"},
		{"10.0.0.4:8000", "prefill", "vllm", "m", "kv_connector=MooncakeConnector", "8999", "kv_engine_id=e-1,zone=a", "ok"},
		{"10.0.0.2:8000", "decode", "vllm", "m", "kv_cache_dtype=fp8,pairing_protocol=p1", "-", "-", "ok"},
		{"10.0.0.3:8000", "decode", "vllm", "m", "-", "-", "-", "refused:", "model:", "missing"},
	}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", b.String())
	}
	for i, l := range lines {
		if got := strings.Fields(l); strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d = %q, want %q", i, got, want[i])
		}
	}
}
