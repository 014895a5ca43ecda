package main

import (
	"fmt"
	"strings"
)

// startExternalEPPs puts a data plane of this process in front of every
// --external-epp picker (someone else's ext_proc endpoint picker, e.g. a
// GIE-derived EPP discovering the same engines from a file), each its own
// arm, so the picker is measured on the same fleet and arrivals as the
// gateway's arms without a proxy of its own. stop ends them all.
func (b *bench) startExternalEPPs() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, e := range b.cfg.externalEPPs {
		name, addr, ok := strings.Cut(e, "=")
		if !ok || name == "" || addr == "" {
			stop()
			return nil, fmt.Errorf("--external-epp %q: want NAME=host:port", e)
		}
		s, err := b.startDataPlaneArm(name, addr)
		if err != nil {
			stop()
			return nil, fmt.Errorf("arm %s: %w", name, err)
		}
		stops = append(stops, s)
	}
	return stop, nil
}
