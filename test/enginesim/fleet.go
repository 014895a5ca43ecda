package enginesim

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"

	"github.com/infergate/infergate/kvexact/bpe"
)

// FleetOptions starts several engines in one process, one loopback address
// each (consecutive from FirstIP), all on the same ports — the way a fleet
// of real engines looks to a gateway.
type FleetOptions struct {
	Engine Options
	// Both, Prefill and Decode are how many engines of each role to start
	// (in that order of addresses).
	Both, Prefill, Decode int
	FirstIP               netip.Addr
	Port                  int
	// ZMQPort is the KV-event PUB port on every engine's address (0: none).
	ZMQPort  int
	NixlPort int
	// TokenizerDir holds tokenizer.json[.gz] and tokenizer_config.json.
	TokenizerDir string
	// Tokenizer, when set, is used instead of loading TokenizerDir: a
	// process that already holds the tokenizer (the routing benchmark's
	// load generator) shares it rather than parsing the vocabulary again.
	// A Tokenizer is safe for concurrent use.
	Tokenizer *bpe.Tokenizer
	Template  bpe.Template
}

// LoadTokenizer loads a Hugging Face tokenizer directory (tokenizer.json or
// tokenizer.json.gz, and tokenizer_config.json for the chat template).
func LoadTokenizer(dir string) (*bpe.Tokenizer, bpe.Template, error) {
	file := filepath.Join(dir, "tokenizer.json")
	tok, err := bpe.LoadFile(file)
	if err != nil {
		if tok, err = bpe.LoadFile(file + ".gz"); err != nil {
			return nil, bpe.Template{}, fmt.Errorf("enginesim: tokenizer in %s: %w", dir, err)
		}
	}
	tmpl, err := bpe.LoadTemplate(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, bpe.Template{}, fmt.Errorf("enginesim: chat template in %s: %w", dir, err)
	}
	return tok, tmpl, nil
}

// Fleet is a set of running engines.
type Fleet struct {
	Engines []*Engine
}

// StartFleet starts every engine, or none.
func StartFleet(o FleetOptions) (*Fleet, error) {
	tok, tmpl := o.Tokenizer, o.Template
	if tok == nil {
		var err error
		if tok, tmpl, err = LoadTokenizer(o.TokenizerDir); err != nil {
			return nil, err
		}
	}
	f := &Fleet{}
	ip := o.FirstIP
	roles := make([]Role, 0, o.Both+o.Prefill+o.Decode)
	for range o.Both {
		roles = append(roles, RoleBoth)
	}
	for range o.Prefill {
		roles = append(roles, RolePrefill)
	}
	for range o.Decode {
		roles = append(roles, RoleDecode)
	}
	for i, role := range roles {
		if !ip.IsLoopback() {
			_ = f.Close()
			return nil, fmt.Errorf("enginesim: %s is not a loopback address", ip)
		}
		cfg := Config{Options: o.Engine, Addr: net.JoinHostPort(ip.String(), strconv.Itoa(o.Port)),
			Tokenizer: tok, Template: tmpl, EngineID: fmt.Sprintf("sim-%d", i), NixlPort: o.NixlPort}
		cfg.Role = role
		if o.ZMQPort > 0 {
			cfg.ZMQAddr = "tcp://" + net.JoinHostPort(ip.String(), strconv.Itoa(o.ZMQPort))
		}
		e, err := Start(cfg)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		f.Engines = append(f.Engines, e)
		ip = ip.Next()
	}
	return f, nil
}

// Close stops every engine.
func (f *Fleet) Close() error {
	var errs []error
	for _, e := range f.Engines {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}
