package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPublishingEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    series
		want int
	}{
		{"none", series{}, 0},
		{"empty endpoint counts nothing", series{`loxilb_pd_kv_blocks{endpoint="127.0.0.21:8000",rule="bench-kv"}`: 0}, 0},
		{"two rules, one endpoint", series{
			`loxilb_pd_kv_blocks{endpoint="127.0.0.21:8000",rule="bench-kv"}`: 6,
			`loxilb_pd_kv_blocks{endpoint="127.0.0.21:8000",rule="other"}`:    6,
		}, 1},
		{"two endpoints", series{
			`loxilb_pd_kv_blocks{endpoint="127.0.0.21:8000",rule="bench-kv"}`: 6,
			`loxilb_pd_kv_blocks{endpoint="127.0.0.22:8000",rule="bench-kv"}`: 1,
			`loxilb_pd_kv_blocks{endpoint="127.0.0.23:8000",rule="bench-kv"}`: 0,
		}, 2},
	} {
		if got := len(publishingEndpoints(tc.m)); got != tc.want {
			t.Errorf("%s: %d endpoints, want %d", tc.name, got, tc.want)
		}
	}
}

// sleepEngine answers vLLM's sleep-mode endpoints as vLLM and llm-d's
// simulator do: /sleep is 200 even when sleep mode is off, and only
// /is_sleeping tells whether the engine (and its prefix cache) went down.
func sleepEngine(t *testing.T, sleeps bool) (*httptest.Server, *atomic.Int32) {
	var woken atomic.Int32
	var asleep atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sleep", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("level") != "1" {
			t.Errorf("sleep level %q, want 1", r.URL.Query().Get("level"))
		}
		asleep.Store(sleeps)
	})
	mux.HandleFunc("GET /is_sleeping", func(w http.ResponseWriter, r *http.Request) {
		if asleep.Load() {
			_, _ = w.Write([]byte(`{"is_sleeping":true}`))
		} else {
			_, _ = w.Write([]byte(`{"is_sleeping":false}`))
		}
	})
	mux.HandleFunc("POST /wake_up", func(w http.ResponseWriter, r *http.Request) {
		asleep.Store(false)
		woken.Add(1)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s, &woken
}

func TestSleepReset(t *testing.T) {
	b := &bench{scrapeC: &http.Client{Timeout: 2 * time.Second}}
	ctx := context.Background()

	s, woken := sleepEngine(t, true)
	if err := b.sleepReset(ctx, s.URL); err != nil {
		t.Fatalf("sleeping engine: %v", err)
	}
	if woken.Load() != 1 {
		t.Fatalf("woken %d times, want 1", woken.Load())
	}

	s, woken = sleepEngine(t, false)
	if err := b.sleepReset(ctx, s.URL); !errors.Is(err, errNoSleep) {
		t.Fatalf("engine without sleep mode: %v, want errNoSleep", err)
	}
	if woken.Load() != 0 {
		t.Fatalf("an engine that never slept was woken")
	}
}

func TestGatewayArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    foreignConfig
		want string
	}{
		{"none", foreignConfig{}, ""},
		{"bind only", foreignConfig{bindAddr: "tcp://127.0.0.1:5557"}, "--kv-bind-addr tcp://127.0.0.1:5557"},
		{"extra only", foreignConfig{extra: stringList{"--kv-tokenize-timeout=500ms"}}, "--kv-tokenize-timeout=500ms"},
		{"bind then extra", foreignConfig{bindAddr: "tcp://127.0.0.1:5557", extra: stringList{"--a=1", "--b=2"}}, "--kv-bind-addr tcp://127.0.0.1:5557 --a=1 --b=2"},
	} {
		c := config{foreign: tc.f}
		if got := strings.Join(c.gatewayArgs(), " "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A metrics endpoint that fails a scrape and answers the next is read; one
// that keeps failing is an error after the tries.
func TestScrapeRetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fails   int32
		wantErr bool
	}{
		{"answers at once", 0, false},
		{"fails twice then answers", 2, false},
		{"fails every try", 3, true},
	} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) <= tc.fails {
				http.Error(w, "gather", http.StatusInternalServerError)
				return
			}
			w.Write([]byte("vllm:prefix_cache_hits_total 7\n"))
		}))
		s, err := scrapeRetry(context.Background(), srv.Client(), srv.URL+"/metrics", vllmMetric, 3, time.Millisecond)
		srv.Close()
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v, want error %v", tc.name, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && s.sum("vllm:prefix_cache_hits_total") != 7 {
			t.Errorf("%s: read %v", tc.name, s)
		}
	}
}
