package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/infergate/infergate/test/bench/eppdataplane"
)

// armEPPKV is the KV-exact arm driven through the endpoint-picker path: the
// gateway answers ext_proc for the kv arm's rule (--epp-rule), and an
// Envoy-like data plane (package eppdataplane, in this process) asks it for
// every request and forwards to the engine it names. Same rule, same
// engines, same inventory as the kv arm: its hit rate should match kv's.
const armEPPKV = "epp-kv"

// eppGatewayArgs are the serve flags that make the gateway an EPP over the
// kv arm's rule, on free loopback ports; it returns them and the ext_proc
// address.
func eppGatewayArgs() ([]string, string, error) {
	p, err := freePort("127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	hp, err := freePort("127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	return []string{"--epp-addr", addr, "--epp-health-addr", fmt.Sprintf("127.0.0.1:%d", hp), "--epp-rule", "bench-" + armKV}, addr, nil
}

// startEPPArm serves the data plane in front of the EPP at eppAddr and
// registers it as the epp-kv arm (run wherever the plan runs external arms).
func (b *bench) startEPPArm(eppAddr string) (stop func(), err error) {
	return b.startDataPlaneArm(armEPPKV, eppAddr)
}

// startDataPlaneArm serves an Envoy-like data plane (package eppdataplane)
// in front of the ext_proc EPP at eppAddr on a free loopback port and
// registers it as arm name, run wherever the plan runs external arms.
func (b *bench) startDataPlaneArm(name, eppAddr string) (stop func(), err error) {
	dp, err := eppdataplane.New(eppAddr)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		dp.Close()
		return nil, err
	}
	srv := &http.Server{Handler: dp}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(b.report, "routebench: %s data plane: %v\n", name, err)
		}
	}()
	u := "http://" + lis.Addr().String()
	b.vips[name] = u
	b.cfg.externalArms = append(b.cfg.externalArms, name+"="+u)
	return func() {
		srv.Close()
		<-done
		dp.Close()
	}, nil
}
