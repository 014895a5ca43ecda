// Command enginesim runs a fleet of simulated vLLM engines on loopback
// addresses (test/enginesim) until interrupted: the engines the routing
// benchmark (test/bench/routebench) puts behind infergate.
//
//	enginesim --engines 8 --first-ip 127.0.0.101 --port 18000 --zmq-port 15557 \
//	    --tokenizer kvexact/bpe/testdata/qwen3
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/infergate/infergate/test/enginesim"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "enginesim:", err)
		os.Exit(1)
	}
}

func run() error {
	o := enginesim.DefaultFleetOptions()
	firstIP := o.FirstIP.String()
	o.Flags(flag.CommandLine, &firstIP)
	flag.Parse()
	if err := o.ParseFirstIP(firstIP); err != nil {
		return err
	}
	f, err := enginesim.StartFleet(o)
	if err != nil {
		return err
	}
	for _, e := range f.Engines {
		fmt.Printf("engine %s events %s\n", e.Addr(), e.KVEndpoint())
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return f.Close()
}
