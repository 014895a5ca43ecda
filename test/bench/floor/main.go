// Command floor is a measuring instrument, not a product path: the least
// an HTTP/1.1 keep-alive proxy has to do for a small request, in two
// designs and four modes, so proxy.sh can put each beside nginx and
// infergate in one run and say how much of the gateway's CPU per request
// is Go's goroutine model, how much is infergate's own code, and what an
// event loop would buy.
//
//   - -mode goroutine: one goroutine per client connection, its own
//     kept-alive engine connection, raw socket calls that wait for
//     readiness before reading a drained socket (no empty reads): the
//     least a goroutine-per-connection Go proxy can do.
//   - -mode goroutine-net: the same on net.Conn as it comes (each read
//     tries the socket first, then parks).
//   - -mode loop: the same framing and connections on one edge-triggered
//     epoll loop per CPU, no goroutine per connection; each loop's epoll
//     set is waited on by Go's netpoller (the loop's goroutine parks once
//     per batch of events, and no thread blocks in epoll_wait).
//   - -mode loop-block: the same loops blocking in epoll_wait, as nginx's
//     workers do (in Go, the runtime's monitor thread then keeps waking
//     to hand a blocked loop's processor on: 0.22–0.24 nanosleep calls per
//     request under wrk -c64, against none in -mode loop).
//
// All four forward heads byte for byte to one fixed engine address: no
// routing, no header rewriting, no admission, ids, metrics or timeouts,
// and only the framing a keep-alive proxy cannot do without
// (Content-Length, chunked, HEAD, 1xx, 204/304, Connection: close). That
// is the point: what is left is the cost of the I/O model.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

// Options says which design runs where.
type Options struct {
	Mode   string // goroutine, goroutine-net, loop, loop-block
	Listen string
	Engine string
	Loops  int // loop mode: event loops (one per CPU by default)
	BufLen int // bytes per direction per connection
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{Mode: "goroutine", Listen: "127.0.0.1:0", Loops: runtime.GOMAXPROCS(0), BufLen: 16 << 10}
}

func main() {
	o := DefaultOptions()
	flag.StringVar(&o.Mode, "mode", o.Mode, "goroutine, goroutine-net, loop or loop-block")
	flag.StringVar(&o.Listen, "listen", o.Listen, "listen address")
	flag.StringVar(&o.Engine, "engine", o.Engine, "engine address (host:port)")
	flag.IntVar(&o.Loops, "loops", o.Loops, "event loops in loop mode")
	flag.IntVar(&o.BufLen, "buf", o.BufLen, "buffer bytes per direction per connection")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := Run(ctx, o, func(addr string) { fmt.Println("floor listening on", addr) })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Run serves until ctx ends; ready gets the listen address once it
// accepts.
func Run(ctx context.Context, o Options, ready func(addr string)) error {
	if o.Engine == "" {
		return errors.New("floor: -engine is required")
	}
	if o.BufLen < 1024 {
		return fmt.Errorf("floor: -buf %d: at least 1024", o.BufLen)
	}
	switch o.Mode {
	case "goroutine", "goroutine-net":
		if o.Mode == "goroutine" && runtime.GOOS != "linux" {
			// internal/rawsock's calls are ENOSYS elsewhere: every read would fail.
			return errors.New("floor: -mode goroutine needs Linux (raw socket calls)")
		}
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return fmt.Errorf("floor: listen: %w", err)
		}
		ready(ln.Addr().String())
		stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
		defer stop()
		g := &goProxy{engine: o.Engine, raw: o.Mode == "goroutine", bufLen: o.BufLen}
		return g.serve(ln)
	case "loop", "loop-block":
		if o.Loops < 1 {
			return fmt.Errorf("floor: -loops %d: at least 1", o.Loops)
		}
		p, err := startLoops(o.Listen, o.Engine, o.Loops, o.BufLen, o.Mode == "loop")
		if err != nil {
			return err
		}
		ready(p.addr)
		<-ctx.Done()
		return p.stop()
	}
	return fmt.Errorf("floor: -mode %q: goroutine, goroutine-net, loop or loop-block", o.Mode)
}
