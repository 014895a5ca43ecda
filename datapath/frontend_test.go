package datapath

import (
	"flag"
	"testing"
)

// frontEndFlag runs the package's tests on another plaintext front end:
// `go test ./datapath -args -frontend=net/http` (make test runs both).
var frontEndFlag = flag.String("frontend", "", "plaintext HTTP front end for the tests: lean or net/http (default: DefaultFrontEnd)")

// relayLoopsFlag runs the package's tests with the SSE relay loops on or
// off (upstream.Options.RelayLoops): `go test ./datapath -args
// -relay-loops=off`. Empty: the default. testOptions applies it, so a test
// that sets RelayLoops itself keeps its choice.
var relayLoopsFlag = flag.String("relay-loops", "", "SSE relay from epoll loops for the tests: on or off (default: upstream.DefaultOptions)")

// withTestRelayLoops applies -relay-loops to o.
func withTestRelayLoops(o Options) Options {
	switch *relayLoopsFlag {
	case "on":
		o.Upstream.RelayLoops = true
	case "off":
		o.Upstream.RelayLoops = false
	case "":
	default:
		panic("-relay-loops: want on or off, got " + *relayLoopsFlag)
	}
	return o
}

// withTestFrontEnd applies -frontend to o.
func withTestFrontEnd(o Options) Options {
	if *frontEndFlag != "" {
		o.HTTPFrontEnd = *frontEndFlag
	}
	return o
}

func TestCheckFrontEnd(t *testing.T) {
	for _, tc := range []struct {
		v      string
		wantOK bool
	}{
		{"", true}, {FrontEndLean, true}, {FrontEndNetHTTP, true}, {"fasthttp", false}, {"Lean", false},
	} {
		o := DefaultOptions()
		o.HTTPFrontEnd = tc.v
		if err := o.CheckFrontEnd(); (err == nil) != tc.wantOK {
			t.Errorf("CheckFrontEnd(%q) = %v, want ok %v", tc.v, err, tc.wantOK)
		}
	}
}
