package datapath

import (
	"flag"
	"testing"
)

// frontEndFlag runs the package's tests on another plaintext front end:
// `go test ./datapath -args -frontend=net/http` (make test runs both).
var frontEndFlag = flag.String("frontend", "", "plaintext HTTP front end for the tests: lean or net/http (default: DefaultFrontEnd)")

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
