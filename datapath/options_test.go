package datapath

import (
	"testing"
	"time"

	"github.com/infergate/infergate/radix"
)

func TestPrefixIndexOptions(t *testing.T) {
	tests := []struct {
		name       string
		budget     int64
		keyMax     int
		wantBudget int64
		wantKeyMax int
	}{
		{"defaults", DefaultOptions().PrefixIndex.BudgetBytes, DefaultOptions().PrefixIndex.MaxKeyBytes, 64 << 20, 256 << 10},
		{"zero keeps radix defaults", 0, 0, radix.DefaultBudgetBytes, radix.DefaultMaxKeyBytes},
		{"overrides", 1 << 20, 4096, 1 << 20, 4096},
	}
	for _, tt := range tests {
		o := DefaultOptions()
		o.PrefixIndex.BudgetBytes, o.PrefixIndex.MaxKeyBytes = tt.budget, tt.keyMax
		got := o.withDefaults().PrefixIndex
		if got.BudgetBytes != tt.wantBudget || got.MaxKeyBytes != tt.wantKeyMax {
			t.Errorf("%s: budget %d key %d, want %d %d", tt.name, got.BudgetBytes, got.MaxKeyBytes, tt.wantBudget, tt.wantKeyMax)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestWithDefaults: a bound with no "off" meaning keeps its default when
// set to zero or below (a 0 flag never means "time out at once"); a knob
// whose 0 means "off" is taken as given.
func TestWithDefaults(t *testing.T) {
	d := DefaultOptions()
	tests := []struct {
		name string
		set  func(*Options)
		get  func(Options) any
		want any
	}{
		{"max body zero", func(o *Options) { o.MaxBodyBytes = 0 }, func(o Options) any { return o.MaxBodyBytes }, d.MaxBodyBytes},
		{"prefill negative", func(o *Options) { o.PrefillTimeout = -time.Second }, func(o Options) any { return o.PrefillTimeout }, d.PrefillTimeout},
		{"decode first byte zero", func(o *Options) { o.DecodeFirstByteTimeout = 0 }, func(o Options) any { return o.DecodeFirstByteTimeout }, d.DecodeFirstByteTimeout},
		{"stream idle zero", func(o *Options) { o.StreamIdleTimeout = 0 }, func(o Options) any { return o.StreamIdleTimeout }, d.StreamIdleTimeout},
		{"streamed body zero", func(o *Options) { o.MaxStreamedBodyBytes = 0 }, func(o Options) any { return o.MaxStreamedBodyBytes }, d.MaxStreamedBodyBytes},
		{"breaker failures zero", func(o *Options) { o.BreakerConnectFailures = 0 }, func(o Options) any { return o.BreakerConnectFailures }, d.BreakerConnectFailures},
		{"set value kept", func(o *Options) { o.BodyStallTimeout = time.Second }, func(o Options) any { return o.BodyStallTimeout }, time.Second},
		{"5xx streak 0 disables", func(o *Options) { o.Breaker5xxStreak = 0 }, func(o Options) any { return o.Breaker5xxStreak }, 0},
		{"no connection cap", func(o *Options) { o.Admission.MaxConns = 0 }, func(o Options) any { return o.Admission.MaxConns }, 0},
		{"no body budget", func(o *Options) { o.Bodies.MaxInFlightBytes = 0 }, func(o Options) any { return o.Bodies.MaxInFlightBytes }, int64(0)},
	}
	for _, tt := range tests {
		o := DefaultOptions()
		tt.set(&o)
		if got := tt.get(o.withDefaults()); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
