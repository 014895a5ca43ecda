// Command rulescale measures rule writes through the management API of a
// built infergate binary: -rules rules created by -workers clients, then
// -posts further POSTs timed one by one, then DELETE /all timed; once per
// flag set in -modes, each against a fresh state directory, in one run so
// the box's load hits every arm alike. Rules share VIP:ports (-per-vip
// rules on one, told apart by model_name) so the run needs few sockets.
//
//	go build -o bin/infergate ./cmd/infergate && go run ./test/bench/rulescale -bin bin/infergate
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	bin     = flag.String("bin", "", "infergate binary")
	n       = flag.Int("rules", 10000, "rules created before measuring")
	m       = flag.Int("posts", 300, "further POSTs timed")
	perVIP  = flag.Int("per-vip", 100, "rules per VIP:port (differ by model_name)")
	workers = flag.Int("workers", 4, "concurrent clients for the bulk create")
	modes   = flag.String("modes", "default;--rules-journal=false", "';'-separated serve flag sets, one arm each ('default' = none)")
	port0   = flag.Int("port", 21000, "API port of the first arm (the next arms count up)")
)

func body(i int) []byte {
	vip := i / *perVIP
	return []byte(fmt.Sprintf(`{"serviceArguments":{"externalIP":"127.3.%d.%d","port":%d,"protocol":"tcp","mode":4,"name":"scale-%d","model_name":"m-%d"},"endpoints":[{"endpointIP":"127.0.0.21","targetPort":8000,"weight":1}]}`,
		vip/250, vip%250+1, 30000+vip%1000, i, i%*perVIP))
}

func post(c *http.Client, base string, b []byte) error {
	resp, err := c.Post(base+"/netlox/v1/config/loadbalancer", "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("POST: %d %s", resp.StatusCode, out)
	}
	return nil
}

func pct(d []time.Duration, q float64) time.Duration {
	slices.Sort(d)
	return d[int(q*float64(len(d)-1))]
}

func run(mode string, port int) error {
	dir, err := os.MkdirTemp("", "rulescale-state-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"serve", "--api-addr", addr, "--state-dir", dir, "--log-level", "warn", "--access-log=false"}
	if mode != "default" {
		args = append(args, strings.Fields(mode)...)
	}
	cmd := exec.Command(*bin, args...)
	var logb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	base := "http://" + addr
	c := &http.Client{Timeout: 5 * time.Minute}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := c.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready: %s", logb.String())
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < *n; i += *workers {
				if err := post(c, base, body(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	bulk := time.Since(start)
	durs := make([]time.Duration, 0, *m)
	for i := *n; i < *n+*m; i++ {
		t0 := time.Now()
		if err := post(c, base, body(i)); err != nil {
			return err
		}
		durs = append(durs, time.Since(t0))
	}
	files, _ := os.ReadDir(dir)
	var sizes []string
	for _, f := range files {
		if fi, err := f.Info(); err == nil {
			sizes = append(sizes, fmt.Sprintf("%s=%d", f.Name(), fi.Size()))
		}
	}
	req, _ := http.NewRequest("DELETE", base+"/netlox/v1/config/loadbalancer/all", nil)
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	del := time.Since(t0)
	if resp.StatusCode != 200 {
		return fmt.Errorf("DELETE all: %d", resp.StatusCode)
	}
	fmt.Printf("%-24s create %d rules: %6.1f s (%4.0f/s) | %d POSTs at %d rules: p50 %6.2f ms p90 %6.2f ms p99 %6.2f ms max %6.2f ms | delete-all %6.2f s | state files before delete: %s\n",
		mode, *n, bulk.Seconds(), float64(*n)/bulk.Seconds(), *m, *n, ms(pct(durs, 0.5)), ms(pct(durs, 0.9)), ms(pct(durs, 0.99)), ms(pct(durs, 1)), del.Seconds(), strings.Join(sizes, " "))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func main() {
	flag.Parse()
	for i, mode := range strings.Split(*modes, ";") {
		if err := run(mode, *port0+i); err != nil {
			fmt.Fprintln(os.Stderr, mode+":", err)
			os.Exit(1)
		}
	}
}
