package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// kvRelay lets engines that dial one subscriber (--kv-bind-addr) feed two
// gateways: the legacy-guard arm (--busy-engine) runs on a second gateway,
// and an engine publishes to one address only. The relay binds a SUB
// socket where the engines dial and republishes every message, frames
// unchanged (topic kv@<ip:port>@<model>, sequence, payload), to each
// gateway's own bound socket, an ipc:// path in a private directory. A
// message published before a gateway's socket is up is dropped, as one
// published before an engine's dial completes is: the bench primes every
// engine against each gateway (primeEngines) either way.
type kvRelay struct {
	ctx      *zmq.Context
	in, out  *zmq.Socket
	dir      string
	stopping atomic.Bool
	wg       sync.WaitGroup
}

// kvRelayOuts is how many gateways a relay feeds: the main one and the
// legacy arm's.
const kvRelayOuts = 2

// startKVRelay binds at bindAddr (where the engines dial).
func startKVRelay(bindAddr string) (*kvRelay, error) {
	dir, err := os.MkdirTemp("", "rb-kv-")
	if err != nil {
		return nil, err
	}
	r := &kvRelay{dir: dir}
	if r.ctx, err = zmq.NewContext(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kv relay: %w", err)
	}
	fail := func(err error) (*kvRelay, error) {
		for _, s := range []*zmq.Socket{r.in, r.out} {
			if s != nil {
				_ = s.Close()
			}
		}
		_ = r.ctx.Term()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kv relay: %w", err)
	}
	if r.in, err = r.ctx.NewSocket(zmq.SUB); err != nil {
		return fail(err)
	}
	if err := errors.Join(r.in.SetSubscribe(""), r.in.SetLinger(0), r.in.Bind(bindAddr)); err != nil {
		return fail(fmt.Errorf("bind %s: %w", bindAddr, err))
	}
	if r.out, err = r.ctx.NewSocket(zmq.PUB); err != nil {
		return fail(err)
	}
	if err := r.out.SetLinger(0); err != nil {
		return fail(err)
	}
	for i := range kvRelayOuts {
		if err := r.out.Connect(r.addr(i)); err != nil { // retried by ZMQ until the gateway binds
			return fail(fmt.Errorf("connect %s: %w", r.addr(i), err))
		}
	}
	r.wg.Go(r.run)
	return r, nil
}

// addr is the address gateway i binds (--kv-bind-addr) to receive.
func (r *kvRelay) addr(i int) string {
	return "ipc://" + filepath.Join(r.dir, fmt.Sprintf("gw%d", i))
}

func (r *kvRelay) run() {
	poller := zmq.NewPoller()
	poller.Add(r.in, zmq.POLLIN)
	for !r.stopping.Load() {
		polled, err := poller.Poll(100 * time.Millisecond)
		if err != nil || len(polled) == 0 {
			continue
		}
		for range 1024 {
			frames, err := r.in.RecvMessageBytes(zmq.DONTWAIT)
			if err != nil {
				break
			}
			_, _ = r.out.SendMessageDontwait(anySlice(frames)...)
		}
	}
}

// anySlice is frames as SendMessage's variadic parts.
func anySlice(frames [][]byte) []any {
	out := make([]any, len(frames))
	for i, f := range frames {
		out[i] = f
	}
	return out
}

// stop ends the relay and removes its sockets' directory.
func (r *kvRelay) stop() {
	if r == nil || r.stopping.Swap(true) {
		return
	}
	r.wg.Wait()
	_ = r.in.Close()
	_ = r.out.Close()
	_ = r.ctx.Term()
	os.RemoveAll(r.dir)
}

// withKVRelay starts the relay when the legacy arm needs the events of
// engines that dial (--kv-bind-addr with --busy-engine) and points args'
// --kv-bind-addr at the relay's first output; otherwise args unchanged.
func (b *bench) withKVRelay(args []string) ([]string, error) {
	if b.cfg.foreign.bindAddr == "" || !b.cfg.busy.enabled {
		return args, nil
	}
	r, err := startKVRelay(b.cfg.foreign.bindAddr)
	if err != nil {
		return nil, err
	}
	b.relay = r
	out := slices.Clone(args)
	for i := range out {
		if out[i] == "--kv-bind-addr" && i+1 < len(out) {
			out[i+1] = r.addr(0)
		}
	}
	return out, nil
}
