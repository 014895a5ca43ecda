package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
)

// Engine self-registration (the Infera pattern): an engine, or
// `infergate register` beside it, keeps a Registration under
// <prefix>/engines/<ip:port> on a lease for as long as it is up. This file
// is the registry itself (write, keep alive, list, validate); rules
// take endpoints from it through rules/selector (see docs/replicas.md).

// Registration is what an engine publishes about itself.
type Registration struct {
	URL           string `json:"url"`    // http://ip:port of its OpenAI server
	Role          string `json:"role"`   // prefill, decode or any
	Engine        string `json:"engine"` // vllm, sglang or trtllm
	Model         string `json:"model"`
	NixlPort      int    `json:"nixl_port,omitempty"`      // vLLM NIXL side channel
	BootstrapPort int    `json:"bootstrap_port,omitempty"` // SGLang or vLLM Mooncake prefill bootstrap server
	KVZmqPort     int    `json:"kvZmqPort,omitempty"`      // KV-events publisher
	DPRanks       int    `json:"dp_ranks,omitempty"`       // data-parallel ranks (0 = 1)
	// Facts a prefill/decode pair must share, when advertised.
	BlockSize       int    `json:"block_size,omitempty"`       // KV cache block size in tokens
	KVConnector     string `json:"kv_connector,omitempty"`     // e.g. NixlConnector, mooncake
	KVCacheDtype    string `json:"kv_cache_dtype,omitempty"`   // e.g. auto, fp8
	PairingProtocol string `json:"pairing_protocol,omitempty"` // an explicit transfer protocol name
	// Labels are free-form key/value labels with a static endpoint's
	// limits (rules.CheckLabels); the vLLM connector sequences read some
	// (kv_engine_id, moriio_mode, tp_size, …) as they do a static one's.
	Labels map[string]string `json:"labels,omitempty"`
}

// PairFacts are the transfer facts r advertises, keyed as
// spec.Endpoint.PairFacts (nil when none): what a prefill/decode pair must
// share, and what `get engines` shows as the pairing key.
func (r Registration) PairFacts() map[string]string {
	facts := map[string]string{}
	if r.BlockSize != 0 {
		facts[spec.FactBlockSize] = strconv.Itoa(r.BlockSize)
	}
	for k, v := range map[string]string{spec.FactKVConnector: r.KVConnector, spec.FactKVCacheDtype: r.KVCacheDtype, spec.FactPairingProtocol: r.PairingProtocol} {
		if v != "" {
			facts[k] = v
		}
	}
	if len(facts) == 0 {
		return nil
	}
	return facts
}

// Registration field values.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
	RoleAny     = "any"
)

var registrationEngines = []string{"vllm", "sglang", "trtllm"}

// Addr is the engine's ip:port, its key under <prefix>/engines/.
func (r Registration) Addr() (netip.AddrPort, error) {
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" && u.Path != "/" {
		return netip.AddrPort{}, fmt.Errorf("url: %q must be http(s)://<ip>:<port>", r.URL)
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil || ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("url: %q must name an IP address and a port", r.URL)
	}
	return ap, nil
}

// Validate refuses a registration no rule could use, naming the field.
func (r Registration) Validate() error {
	ap, err := r.Addr()
	if err != nil {
		return err
	}
	if ap.Addr().IsUnspecified() {
		// A listen address: nobody can connect to it, and as a transfer
		// address a peer would reach itself.
		return fmt.Errorf("url: %q names the unspecified address; register the engine's own address", r.URL)
	}
	switch r.Role {
	case RolePrefill, RoleDecode, RoleAny:
	default:
		return fmt.Errorf("role: %q is not prefill, decode or any", r.Role)
	}
	if !contains(registrationEngines, r.Engine) {
		return fmt.Errorf("engine: %q is not one of %s (llama.cpp P/D is not served)", r.Engine, strings.Join(registrationEngines, ", "))
	}
	if strings.TrimSpace(r.Model) == "" {
		return errors.New("model: required (the rule's selector matches on it)")
	}
	for name, p := range map[string]int{"nixl_port": r.NixlPort, "bootstrap_port": r.BootstrapPort, "kvZmqPort": r.KVZmqPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("%s: %d is not a port", name, p)
		}
	}
	switch {
	case r.Engine == "sglang" && r.Role == RolePrefill && r.BootstrapPort == 0:
		return errors.New("bootstrap_port: required for an SGLang prefill (its decode peers connect to it)")
	case r.Engine != "vllm" && r.NixlPort != 0:
		return fmt.Errorf("nixl_port: engine %q does not use a NIXL side channel", r.Engine)
	case r.BootstrapPort != 0 && r.Engine != "sglang" && !rules.BootstrapPortAllowed(spec.Engine(r.Engine), r.SpecRole(), r.KVConnector):
		// SGLang keeps accepting the port on any role (a registrar may pass
		// it uniformly; only a prefill's is used); vLLM follows the static
		// endpoint's rule: a MooncakeConnector prefill's bootstrap server.
		return fmt.Errorf("bootstrap_port: engine %q has no bootstrap server here (vLLM: a prefill with kv_connector MooncakeConnector)", r.Engine)
	case r.DPRanks < 0:
		return fmt.Errorf("dp_ranks: %d is negative", r.DPRanks)
	case r.BlockSize < 0 || r.BlockSize > 1024:
		return fmt.Errorf("block_size: %d is not within 0..1024", r.BlockSize)
	case len(r.KVConnector) > 64:
		return errors.New("kv_connector: longer than 64 characters")
	case len(r.KVCacheDtype) > 64:
		return errors.New("kv_cache_dtype: longer than 64 characters")
	case len(r.PairingProtocol) > 64:
		return errors.New("pairing_protocol: longer than 64 characters")
	}
	if key, msg := rules.CheckLabels(r.Labels); msg != "" {
		if key != "" {
			return fmt.Errorf("labels.%s: %s", key, msg)
		}
		return fmt.Errorf("labels: %s", msg)
	}
	return nil
}

// SpecRole is r's role as a rule endpoint's (any: spec.RoleAny).
func (r Registration) SpecRole() spec.Role {
	switch r.Role {
	case RolePrefill:
		return spec.RolePrefill
	case RoleDecode:
		return spec.RoleDecode
	}
	return spec.RoleAny
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (b *Backend) engineKey(addr netip.AddrPort) string {
	return b.opts.Prefix + "/engines/" + addr.String()
}

// Register validates r and keeps it registered on a lease of ttl until ctx
// ends, then revokes it (a clean stop deregisters at once; a crash lets
// the lease expire). A lost lease (etcd away longer than ttl) is granted
// again when etcd returns. It returns the validation error, or nil after
// ctx ends.
func (b *Backend) Register(ctx context.Context, r Registration, ttl time.Duration, registered func()) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("registration refused: %w", err)
	}
	addr, _ := r.Addr()
	val, _ := json.Marshal(r)
	secs := max(int64(ttl/time.Second), 1)
	cli, err := b.waitClient(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before etcd was reached
		}
		return err
	}
	var lease clientv3.LeaseID
	var alive <-chan *clientv3.LeaseKeepAliveResponse
	for {
		if lease == 0 {
			rctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
			g, err := cli.Grant(rctx, secs)
			if err == nil {
				_, err = cli.Put(rctx, b.engineKey(addr), string(val), clientv3.WithLease(g.ID))
			}
			cancel()
			if err == nil {
				lease = g.ID
				if alive, err = cli.KeepAlive(ctx, lease); err != nil {
					lease = 0
				} else if registered != nil {
					registered()
				}
			}
		}
		if lease == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = cli.Revoke(rctx, lease)
			cancel()
			return nil
		case _, ok := <-alive:
			if !ok { // keepalive ended: the lease expired or etcd went away
				lease = 0
			}
		}
	}
}

// EngineEntry is one registration as listed, with why it is refused.
type EngineEntry struct {
	Key          string       `json:"key"`
	Registration Registration `json:"registration"`
	Refused      string       `json:"refused,omitempty"`
}

// Engines lists every registration under prefix, validating each the way
// Register does (a value written by anything else is checked too).
func Engines(ctx context.Context, cli Client, prefix string) ([]EngineEntry, error) {
	p := "/" + strings.Trim(prefix, "/") + "/engines/"
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: list engines: %w", err)
	}
	var out []EngineEntry
	for _, kv := range resp.Kvs {
		e := EngineEntry{Key: strings.TrimPrefix(string(kv.Key), p)}
		if err := json.Unmarshal(kv.Value, &e.Registration); err != nil {
			e.Refused = "not a registration: " + err.Error()
		} else if err := e.Registration.Validate(); err != nil {
			e.Refused = err.Error()
		} else if addr, _ := e.Registration.Addr(); addr.String() != e.Key {
			e.Refused = fmt.Sprintf("registered under %q but its url is %s", e.Key, addr)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// WatchEngines calls onChange("added") when a registration appears and
// onChange("removed") when one leaves (deleted or lease expired) until
// Close. It feeds the registration-churn metric.
func (b *Backend) WatchEngines(onChange func(change string)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		cli, err := b.waitClient(b.done)
		if err != nil {
			return
		}
		p := b.opts.Prefix + "/engines/"
		for b.done.Err() == nil {
			for resp := range cli.Watch(clientv3.WithRequireLeader(b.done), p, clientv3.WithPrefix()) {
				for _, ev := range resp.Events {
					switch {
					case ev.Type == clientv3.EventTypeDelete:
						onChange("removed")
					case ev.IsCreate():
						onChange("added")
					}
				}
			}
			select {
			case <-b.done.Done():
			case <-time.After(time.Second):
			}
		}
	}()
}
