package pd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/pd/bufpool"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// TestSharedPoolKeepsEachPrompt: the three dialects share one buffer pool
// (as every rule of a gateway does) and serve many requests at once, each
// with its own prompt big enough for its leg bodies to be pooled, some of
// them through a prefill failover that rewrites the leg body in place. A
// leg body given back to the pool while a send still read it, or handed to
// two requests at once, would put one client's prompt (or a mix of two)
// in another request's leg: every leg every engine received must carry
// exactly one request's prompt, whole, and every request must reach a
// decode with its own. Run with -race: a write into a buffer a send still
// reads is a race the detector reports.
func TestSharedPoolKeepsEachPrompt(t *testing.T) {
	const (
		perDialect = 12
		rounds     = 2
		failovers  = 3 // primary prefill failures per round: the retry rewrites the buffer
	)
	pool := bufpool.New(bufpool.Options{MaxBytes: 4 << 20})
	sender := upstream.New(time.Second, 64, nil)
	defer sender.CloseIdle()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type setup struct {
		engine spec.Engine
		f      *fleet
		d      pd.Dialect
	}
	var setups []setup
	for k, e := range engines {
		o := testOptions()
		o.Buffers = pool
		d, ok := pd.New(e, o)
		if !ok {
			t.Fatalf("no dialect for %s", e)
		}
		setups = append(setups, setup{e, startFleetAt(t, e, 10+3*k), d})
	}
	// prompt is request id's prompt: its tag repeated past the pool's
	// smallest kept buffer (16 KiB), so that its leg bodies are pooled.
	prompt := func(id string) string { return strings.Repeat(id+" ", 24<<10/(len(id)+1)) }

	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, len(setups)*perDialect)
		for _, s := range setups {
			// A sequential prefill's 500 is retried on the alternate; an
			// SGLang pair is retried (fresh room) when its prefill dies.
			fault := pdfake.Fault500
			if s.engine == spec.EngineSGLang {
				fault = pdfake.FaultDropBeforeFirstByte
			}
			s.f.prefill.Inject(fault, failovers)
			for i := range perDialect {
				id := fmt.Sprintf("r%d-%s-%02d", round, s.engine, i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := `{"model":"m","max_tokens":4,"prompt":"` + prompt(id) + `"}`
					pair := pd.Pair{Prefill: s.f.prefill.Endpoint(), Decode: s.f.dec.Endpoint(), AltPrefill: []spec.Endpoint{s.f.alt.Endpoint()}}
					w := httptest.NewRecorder()
					o := s.d.Serve(ctx, w, &pd.Request{Path: pathCompletions, Header: http.Header{"Content-Type": {"application/json"}},
						Body: []byte(body), Rule: s.f.rule}, pair, sender)
					if o.Status != http.StatusOK || w.Code != http.StatusOK {
						errs <- fmt.Errorf("%s: outcome %d, client got %d: %s", id, o.Status, w.Code, w.Body.String())
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			return
		}
		for _, s := range setups {
			decoded := map[string]int{}
			for _, e := range []*pdfake.Engine{s.f.prefill, s.f.alt, s.f.dec} {
				recs, err := e.WaitDone(ctx, -1)
				if err != nil {
					t.Fatalf("%s: %v", s.engine, err)
				}
				for _, r := range recs {
					var b struct {
						Prompt string `json:"prompt"`
					}
					if err := json.Unmarshal(r.Body, &b); err != nil {
						t.Fatalf("%s: a leg body that is not JSON: %v", s.engine, err)
					}
					id, _, _ := strings.Cut(b.Prompt, " ")
					if b.Prompt != prompt(id) {
						t.Errorf("%s: a leg carried a prompt that is not one request's whole prompt (starts %.40q)", s.engine, b.Prompt)
					}
					if e == s.f.dec && !r.Cancelled { // an SGLang retry cancels the first decode
						decoded[id]++
					}
				}
				e.ForgetRecords()
			}
			for i := range perDialect {
				id := fmt.Sprintf("r%d-%s-%02d", round, s.engine, i)
				if decoded[id] != 1 {
					t.Errorf("%s: the decode got request %s's prompt %d times, want once", s.engine, id, decoded[id])
				}
			}
		}
	}
	if h := pool.Held(); h == 0 || h > 4<<20 {
		t.Errorf("the shared pool holds %d bytes after the rounds, want some and at most %d", h, 4<<20)
	}
}

// startFleetAt is startFleet on 127.0.10.<first>–<first+2> with
// side-channel ports the kernel picks, so that it runs beside startFleet's
// fleets.
func startFleetAt(t *testing.T, engine spec.Engine, first int) *fleet {
	t.Helper()
	d := fakeDialect(engine)
	try := func(ip int, role pdfake.Role, boot uint16) (*pdfake.Engine, error) {
		cfg := pdfake.DefaultConfig(d, role)
		cfg.Addr, cfg.BootstrapPort = fmt.Sprintf("127.0.10.%d:0", ip), boot
		cfg.RendezvousTimeout = 10 * time.Second
		e, err := pdfake.Start(cfg)
		if err != nil {
			return nil, fmt.Errorf("start fake %s %s: %w", d, role, err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e, nil
	}
	f := &fleet{engine: engine}
	var err error
	for attempt := 0; ; attempt++ {
		if f.prefill, err = try(first, pdfake.Prefill, 0); err != nil {
			t.Fatal(err)
		}
		// SGLang's rule-wide bootstrap port: the same port on the next IP.
		if f.alt, err = try(first+1, pdfake.Prefill, f.prefill.BootstrapPort()); err == nil {
			break
		}
		if attempt == 4 || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
		_ = f.prefill.Close()
	}
	if f.dec, err = try(first+2, pdfake.Decode, 0); err != nil {
		t.Fatal(err)
	}
	f.rule = &spec.Rule{Name: "rule-" + string(engine), Engine: engine,
		Key: spec.Key{ModelName: "m"}, PD: &spec.PD{BootstrapPort: f.prefill.BootstrapPort()}}
	return f
}
