// Command fakeengine runs the OpenAI-compatible fake engine as a process, for
// the proxy benchmark and manual end-to-end runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/infergate/infergate/internal/fakeengine"
)

func main() {
	o := fakeengine.Options{}
	flag.StringVar(&o.Addr, "addr", "127.0.0.1:8000", "listen address")
	flag.StringVar(&o.Name, "name", "fake", "engine name (X-Fake-Engine header)")
	flag.StringVar(&o.Model, "model", "fake-model", "model id")
	flag.IntVar(&o.Tokens, "tokens", 4, "completion tokens / SSE chunks")
	flag.DurationVar(&o.Latency, "latency", 0, "delay before answering a completion")
	flag.DurationVar(&o.TokenDelay, "token-delay", 0, "delay between SSE chunks")
	flag.BoolVar(&o.NoLog, "no-log", true, "do not keep a request log (long runs)")
	status := flag.Int("status", 0, "answer every completion with this HTTP status")
	flag.Parse()

	s, err := fakeengine.Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s.SetStatus(*status)
	fmt.Println("fakeengine listening on", s.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	s.Close()
}
