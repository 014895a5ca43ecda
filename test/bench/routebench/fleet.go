package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/infergate/infergate/kvexact/bpe"
	"github.com/infergate/infergate/test/enginesim"
)

// simFleet is a simulated fleet: the enginesim binary in a process of its
// own (--enginesim, the default), which loads its tokenizer while this
// process loads its own, or with --enginesim "" in this process on the
// tokenizer the load generator already holds (one vocabulary parse fewer).
// The separate process is the default: in short runs on a busy 2-core box
// the in-process fleet, sharing one process's CPU with the client, backed
// the kv arm up at 150 % where the process fleet did not, and its set-up
// was no shorter (the two loads run side by side). Either way the gateway
// is a separate process, so its CPU read from /proc stays its own.
type simFleet struct {
	name   string
	args   []string // enginesim flags
	inproc *enginesim.Fleet
	p      *proc
	out    io.Reader // the process's stdout, until ready
}

// launchSimFleet starts a fleet from enginesim flags. A process fleet loads
// its tokenizer while the caller loads its own; ready waits for it.
func launchSimFleet(name, bin string, logf io.Writer, args []string) (*simFleet, error) {
	f := &simFleet{name: name, args: args}
	if bin == "" {
		return f, nil // started by ready, with the caller's tokenizer
	}
	var err error
	if f.p, f.out, err = startProc(name, logf, bin, args...); err != nil {
		return nil, err
	}
	return f, nil
}

// ready waits for a process fleet, or starts the in-process one with tok
// and tmpl.
func (f *simFleet) ready(tok *bpe.Tokenizer, tmpl bpe.Template) error {
	if f.p != nil {
		if err := waitLine(f.out, "ready", 60*time.Second); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		return nil
	}
	o, err := fleetOptions(f.name, f.args)
	if err != nil {
		return err
	}
	o.Tokenizer, o.Template = tok, tmpl
	shareProcs()
	if f.inproc, err = enginesim.StartFleet(o); err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	return nil
}

// shareProcs gives this process the Ps the load generator and a separate
// fleet process had together (GOMAXPROCS defaults to the core count in
// each), unless GOMAXPROCS is set: on a box shared with other work the
// kernel shares the cores by runnable thread, and moving the fleet into
// this process should not shrink the bench's share of a busy box.
func shareProcs() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2 * runtime.NumCPU())
	}
}

// fleetOptions parses enginesim flags as the enginesim command does.
func fleetOptions(name string, args []string) (enginesim.FleetOptions, error) {
	o := enginesim.DefaultFleetOptions()
	firstIP := o.FirstIP.String()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.Flags(fs, &firstIP)
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%s flags: %w", name, err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%s flags: unexpected %q", name, fs.Args())
	}
	return o, o.ParseFirstIP(firstIP)
}

// stop ends the fleet; a nil or never-started fleet is a no-op, so it may
// be deferred before the fleet is known.
func (f *simFleet) stop(grace time.Duration) {
	if f == nil {
		return
	}
	if f.inproc != nil {
		_ = f.inproc.Close()
		f.inproc = nil
	}
	f.p.stop(grace)
}
