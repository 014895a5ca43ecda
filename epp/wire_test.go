package epp

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func testMetricServed(m *Metrics, match string) float64 {
	return counterValue(m.Served.WithLabelValues(match))
}

func TestDecodeHints(t *testing.T) {
	cases := []struct {
		name    string
		h       Headers
		want    Hints
		wantErr bool
	}{
		{"none", Headers{}, Hints{}, false},
		{"all", Headers{HeaderObjective: {"batch"}, HeaderFairnessID: {"t1"}, HeaderModelName: {"m2"}, HeaderSLOTTFT: {"100"}, HeaderSLOTPOT: {"0.5"}},
			Hints{Objective: "batch", FairnessID: "t1", ModelName: "m2", TTFT: 100 * time.Millisecond, TPOT: 500 * time.Microsecond}, false},
		{"first value wins", Headers{HeaderObjective: {"a", "b"}}, Hints{Objective: "a"}, false},
		{"spaces tolerated", Headers{HeaderSLOTTFT: {" 20 "}}, Hints{TTFT: 20 * time.Millisecond}, false},
		{"ttft not a number", Headers{HeaderSLOTTFT: {"fast"}}, Hints{}, true},
		{"ttft negative", Headers{HeaderSLOTTFT: {"-1"}}, Hints{}, true},
		{"tpot absurd", Headers{HeaderSLOTTFT: {"1e300"}}, Hints{}, true},
		// ParseFloat takes these; NaN compares false both ways and would
		// become a large negative duration.
		{"ttft NaN", Headers{HeaderSLOTTFT: {"NaN"}}, Hints{}, true},
		{"tpot nan", Headers{HeaderSLOTPOT: {"nan"}}, Hints{}, true},
		{"ttft infinite", Headers{HeaderSLOTTFT: {"+Inf"}}, Hints{}, true},
		{"ttft hex float", Headers{HeaderSLOTTFT: {"0x1p4"}}, Hints{TTFT: 16 * time.Millisecond}, false},
	}
	for _, tc := range cases {
		got, err := decodeHints(tc.h)
		var r *Refusal
		if (err != nil) != tc.wantErr || (err != nil && (!errors.As(err, &r) || r.Status != 400)) {
			t.Errorf("%s: err = %v, want 400 refusal: %v", tc.name, err, tc.wantErr)
		}
		if got != tc.want {
			t.Errorf("%s: hints = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// subsetAddrs are n distinct addresses from 10.<net>.100.100:8000 on,
// every octet three digits (net from 100 up): all as long as each other,
// so comparing two costs a byte comparison, not just a length check.
func subsetAddrs(net, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.%d.%d:8000", net+i/22500, 100+i/150%150, 100+i%150)
	}
	return out
}

func TestFilterSubset(t *testing.T) {
	a, b, c := "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"
	pick := subsetAddrs(200, 6) // longer than shortPick
	unknown := subsetAddrs(100, 100_000)
	long := append(slices.Clone(unknown), pick[4], pick[1], pick[4])
	cases := []struct {
		name        string
		eps, subset []string
		want        []string
	}{
		{"no hint keeps all", []string{a, b}, nil, []string{a, b}},
		{"empty hint keeps none", []string{a, b}, []string{}, nil},
		{"order of the pick kept", []string{c, a, b}, []string{b, c}, []string{c, b}},
		{"none eligible", []string{a}, []string{c}, nil},
		{"empty pick", nil, []string{a}, nil},
		{"repeats in the hint", []string{a, b}, []string{b, b, b}, []string{b}},
		{"repeats in the pick kept", []string{a, b, a}, []string{a}, []string{a, a}},
		{"unknown entries ignored", []string{a, b}, []string{"x", "10.9.9.9:1", a}, []string{a}},
		{"long hint, short pick", []string{c, pick[1]}, long, []string{pick[1]}},
		{"long hint, long pick", pick, long, []string{pick[1], pick[4]}},
		{"long hint, long pick with repeats", append(slices.Clone(pick), pick[4], a), long, []string{pick[1], pick[4], pick[4]}},
		{"long hint, nothing inside", pick, unknown, nil},
		{"long hint naming the whole pick", pick, append(slices.Clone(unknown), pick...), pick},
		{"long pick, empty hint", pick, []string{}, nil},
	}
	for _, tc := range cases {
		got, ref := filterSubset(tc.eps, tc.subset), filterSubsetLoops(tc.eps, tc.subset)
		if !slices.Equal(got, tc.want) || !slices.Equal(got, ref) {
			t.Errorf("%s: %q, want %q (nested loops: %q)", tc.name, got, tc.want, ref)
		}
	}
	// Filtering must not write into the picker's slice.
	for _, sub := range [][]string{{c}, append(slices.Clone(unknown), pick[2])} {
		eps := append(slices.Clone(pick), a, b, c)
		filterSubset(eps, sub)
		if !slices.Equal(eps, append(slices.Clone(pick), a, b, c)) {
			t.Errorf("filterSubset modified its input: %q", eps)
		}
	}
}

// BenchmarkFilterSubset: the server's subset check of a pick of one and of
// sixteen endpoints against a short hint and a 100,000-address one (the
// picked addresses last, every entry as long as theirs: the loops' worst
// case), by the nested loops ("loops", before) and by
// filterSubset ("set", after). Run with -count so the arms alternate.
func BenchmarkFilterSubset(b *testing.B) {
	pick := subsetAddrs(200, 16)
	long := append(subsetAddrs(100, 100_000-len(pick)), pick...)
	cases := []struct {
		name        string
		eps, subset []string
	}{
		{"hint=4/pick=1", pick[:1], []string{pick[3], pick[9], pick[0], pick[15]}},
		{"hint=100000/pick=1", pick[:1], long},
		{"hint=100000/pick=16", pick, long},
	}
	for _, tc := range cases {
		for _, arm := range []struct {
			name string
			f    func(eps, subset []string) []string
		}{{"loops", filterSubsetLoops}, {"set", filterSubset}} {
			b.Run(tc.name+"/"+arm.name, func(b *testing.B) {
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					n += len(arm.f(tc.eps, tc.subset))
				}
				if n == 0 {
					b.Fatal("nothing kept: every picked endpoint is in the hint")
				}
			})
		}
	}
}

func TestServedMatch(t *testing.T) {
	res := Result{Endpoints: []string{"a:1", "b:1"}}
	cases := []struct {
		served, want string
	}{
		{"", ServedUnreported},
		{"a:1", ServedPrimary},
		{"b:1", ServedFallback},
		{"c:1", ServedOther},
	}
	for _, tc := range cases {
		if got := servedMatch(Outcome{Result: res, Endpoint: tc.served}); got != tc.want {
			t.Errorf("served %q: %s, want %s", tc.served, got, tc.want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"defaults", func(*Options) {}, ""},
		{"no addr", func(o *Options) { o.Addr = "" }, "epp: addr"},
		{"same addr", func(o *Options) { o.HealthAddr = o.Addr }, "epp: health_addr"},
		{"zero body", func(o *Options) { o.MaxBodyBytes = 0 }, "epp: max_body_bytes"},
		{"no namespace", func(o *Options) { o.DestinationNamespace = "" }, "epp: destination_namespace"},
		{"no subset namespace", func(o *Options) { o.SubsetNamespace = "" }, "epp: subset_namespace"},
		{"upper-case header", func(o *Options) { o.RefusalReasonHeader = "X-Reason" }, "epp: refusal_reason_header"},
		{"negative max endpoints", func(o *Options) { o.MaxEndpoints = -1 }, "epp: max_endpoints"},
		{"negative drain", func(o *Options) { o.DrainTimeout = -1 }, "epp: drain_timeout"},
		{"negative stream workers", func(o *Options) { o.StreamWorkers = -1 }, "epp: stream_workers"},
		{"body budget below the body cap", func(o *Options) { o.BodyBudgetBytes = o.MaxBodyBytes - 1 }, "epp: body_budget_bytes"},
		{"body budget at the body cap, no room for headers", func(o *Options) { o.BodyBudgetBytes = o.MaxBodyBytes }, "epp: body_budget_bytes"},
		{"body budget at the body cap and its headers", func(o *Options) { o.BodyBudgetBytes = o.MaxBodyBytes + HeaderRoom }, ""},
		{"negative stream cap", func(o *Options) { o.MaxStreams = -1 }, "epp: max_streams"},
		{"no stream cap", func(o *Options) { o.MaxStreams = 0 }, ""},
		{"destination namespace not UTF-8", func(o *Options) { o.DestinationNamespace = "envoy.lb\xff" }, "epp: destination_namespace"},
		{"subset namespace not UTF-8", func(o *Options) { o.SubsetNamespace = "\xff" }, "epp: subset_namespace"},
		{"stream window below HTTP/2's", func(o *Options) { o.Transport.StreamWindow = 1024 }, "epp: stream_window"},
		{"connection window below HTTP/2's", func(o *Options) { o.Transport.ConnWindow = 65534 }, "epp: conn_window"},
		// gRPC fixes both windows when either is set, the unset one at 64 KiB.
		{"only the stream window", func(o *Options) { o.Transport.ConnWindow = 0 }, "epp: conn_window"},
		{"only the connection window", func(o *Options) { o.Transport.StreamWindow = 0 }, "epp: stream_window"},
		{"both windows dynamic", func(o *Options) { o.Transport.StreamWindow, o.Transport.ConnWindow = 0, 0 }, ""},
	}
	for _, tc := range cases {
		o := DefaultOptions()
		tc.mutate(&o)
		err := o.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || len(err.Error()) < len(tc.wantErr) || err.Error()[:len(tc.wantErr)] != tc.wantErr):
			t.Errorf("%s: err = %v, want prefix %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestDecodeHeadersRepeated(t *testing.T) {
	hm := reqHeaders(nil, false).GetRequestHeaders().GetHeaders()
	for _, kv := range [][2]string{{"Accept", "a"}, {"x-one", "1"}, {"accept", "b"}, {"x-two", "2"}, {"X-Été", "3"}} {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[0], Value: kv[1]})
	}
	got, _ := decodeHeaders(hm)
	want := Headers{"accept": {"a", "b"}, "x-one": {"1"}, "x-two": {"2"}, "x-été": {"3"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decodeHeaders = %v, want %v", got, want)
	}
}

// decodeHeaders reports at least the names and values it holds (plus
// headerEntryBytes an entry): a stream takes that from the body budget,
// so a name that lower-cases longer than it came (U+023A: two bytes, its
// lower case three) must count as it is held, not as it was received.
func TestDecodeHeadersHeld(t *testing.T) {
	cases := []struct{ name, key string }{
		{"lower case", "x-filler"},
		{"upper case", "X-Filler"},
		{"lower case longer than received", strings.Repeat("\u023a", 4096)},
	}
	for _, tc := range cases {
		hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: tc.key, RawValue: []byte("v")}, {Key: tc.key, Value: "w"}}}
		got, held := decodeHeaders(hm)
		var want int64
		for k, vv := range got {
			for _, v := range vv {
				want += int64(len(k)+len(v)) + headerEntryBytes
			}
		}
		if held < want {
			t.Errorf("%s: decodeHeaders reports %d B held, its names and values take %d B", tc.name, held, want)
		}
	}
}

// TestRefusalRetryAfter: a refusal with RetryAfter carries it as whole
// seconds, rounded up; one without sends no Retry-After.
func TestRefusalRetryAfter(t *testing.T) {
	tests := []struct {
		name  string
		after time.Duration
		want  string // "" = no header
	}{
		{"none", 0, ""},
		{"negative", -time.Second, ""},
		{"whole seconds", 3 * time.Second, "3"},
		{"rounded up", 1500 * time.Millisecond, "2"},
		{"under a second", time.Millisecond, "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ir := refusalResponse(DefaultRefusalReasonHeader, &Refusal{Status: 429, Reason: "queue_full", RetryAfter: tc.after}).GetImmediateResponse()
			hs := map[string]string{}
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				hs[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
			}
			if got, ok := hs[headerRetryAfter]; got != tc.want || ok != (tc.want != "") {
				t.Errorf("retry-after %q (set %v), want %q", got, ok, tc.want)
			}
			if hs[DefaultRefusalReasonHeader] != "queue_full" {
				t.Errorf("reason header %q, want queue_full", hs[DefaultRefusalReasonHeader])
			}
		})
	}
}
