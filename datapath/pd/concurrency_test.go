package pd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
)

// TestMain fails the package when goroutines outlive the tests: Serve must
// join every leg it starts, and every test closes what it opened.
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before+2 {
			buf := make([]byte, 1<<20)
			fmt.Fprintf(os.Stderr, "goroutine leak: %d before, %d after\n%s\n", before, n, buf[:runtime.Stack(buf, true)])
			code = 1
		}
	}
	os.Exit(code)
}

// TestConcurrentRequests runs many requests of every dialect at once through
// one Dialect and Sender (shared state under -race) and checks each SGLang
// request got its own room.
func TestConcurrentRequests(t *testing.T) {
	const n = 16
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			f := startFleet(t, engine)
			d := mustDialect(t, engine)
			sender := upstream.New(time.Second, 64, nil)
			defer sender.CloseIdle()
			pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				d.Serve(r.Context(), w, &pd.Request{Path: r.URL.Path, Header: r.Header, Body: b, Rule: f.rule}, pair, sender)
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					stream := i%2 == 0
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+pathChat, strings.NewReader(clientBody(pathChat, stream)))
					resp, err := srv.Client().Do(req)
					if err != nil {
						errs <- err
						return
					}
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 {
						errs <- fmt.Errorf("request %d: %d %v %s", i, resp.StatusCode, err, b)
					}
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			recs := waitLegs(t, f.prefill, n)
			if engine != spec.EngineSGLang {
				return
			}
			rooms := map[string]bool{}
			for _, r := range recs {
				var tr struct {
					Room json.Number `json:"bootstrap_room"`
				}
				if err := json.Unmarshal(r.Body, &tr); err != nil {
					t.Fatal(err)
				}
				rooms[tr.Room.String()] = true
			}
			if len(rooms) != n {
				t.Errorf("%d distinct rooms for %d requests", len(rooms), n)
			}
		})
	}
}
