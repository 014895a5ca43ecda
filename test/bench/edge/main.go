// Command edge drives a running gateway the way a hostile client would and
// reports what a well-behaved client and an operator see meanwhile. It is
// run by test/bench/edge.sh; everything stays on loopback.
//
//	flood:  -flood N idle connections (-keepalive: after one request) from -flood-src (comma list of
//	        127.0.0.x, spread round-robin) plus -slow slowloris connections,
//	        while -good-src sends POSTs and the operator polls the API for
//	        -duration. Prints success rate and p99 of both.
//	bodies: -bodies N connections that send only headers declaring
//	        -declared bytes; prints the gateway's RSS (-pid) before, while
//	        they wait and after they are closed.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	mode := flag.String("mode", "flood", "flood | bodies")
	vip := flag.String("vip", "", "gateway VIP ip:port")
	api := flag.String("api", "", "management API ip:port")
	flood := flag.Int("flood", 15000, "idle connections to open")
	slow := flag.Int("slow", 0, "slowloris connections (one header byte per second)")
	floodSrc := flag.String("flood-src", "127.0.0.2", "comma-separated source addresses of the flood")
	goodSrc := flag.String("good-src", "127.0.0.3", "source address of the well-behaved client")
	duration := flag.Duration("duration", 10*time.Second, "how long the good client and the operator run under the flood")
	bodies := flag.Int("bodies", 1000, "headers-only connections (bodies mode)")
	declared := flag.Int64("declared", 32<<20, "Content-Length they declare")
	pid := flag.Int("pid", 0, "gateway pid for RSS (bodies mode)")
	keepAlive := flag.Bool("keepalive", true, "flood connections send one request, then stay idle (else they never send)")
	flag.Parse()
	if *vip == "" {
		fmt.Fprintln(os.Stderr, "edge: -vip is required")
		os.Exit(2)
	}
	switch *mode {
	case "flood":
		runFlood(*vip, *api, *flood, *slow, strings.Split(*floodSrc, ","), *goodSrc, *duration, *keepAlive)
	case "bodies":
		runBodies(*vip, *bodies, *declared, *pid)
	default:
		fmt.Fprintln(os.Stderr, "edge: unknown -mode", *mode)
		os.Exit(2)
	}
}

func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 3 * time.Second}
	return d.Dial("tcp", addr)
}

// holdFlood opens n idle connections and keeps every admitted one open
// until ctx ends. It returns how many were still open after a settle time.
func holdFlood(ctx context.Context, wg *sync.WaitGroup, addr string, n int, srcs []string, slow int, keepAlive bool) (open, failed, admitted *atomic.Int64) {
	open, failed, admitted = new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)
	sem := make(chan struct{}, 256) // dial concurrency
	for i := range n + slow {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			c, err := dialFrom(srcs[i%len(srcs)], addr)
			<-sem
			if err != nil {
				failed.Add(1)
				return
			}
			defer c.Close()
			open.Add(1)
			defer open.Add(-1)
			go func() { <-ctx.Done(); _ = c.Close() }()
			if i < n && keepAlive {
				// One request, then idle on the kept-alive connection: the
				// costliest idle connection (the keep-alive idle timeout,
				// not the header timeout, bounds it).
				if _, err := io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
					return
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				admitted.Add(1)
			}
			if i >= n { // slowloris: a header byte per second, never finished
				hdr := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 1000)
				for k := 0; k < len(hdr) && ctx.Err() == nil; k++ {
					if _, err := c.Write([]byte{hdr[k]}); err != nil {
						return
					}
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}
			_, _ = io.Copy(io.Discard, c) // returns when the gateway closes it
		}()
	}
	return open, failed, admitted
}

type sample struct {
	ok  bool
	lat time.Duration
}

func p99(s []sample) (rate float64, p99 time.Duration, n int) {
	var lats []time.Duration
	good := 0
	for _, x := range s {
		if x.ok {
			good++
		}
		lats = append(lats, x.lat)
	}
	if len(s) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lats)
	return float64(good) / float64(len(s)), lats[(len(lats)*99)/100], len(s)
}

func runFlood(vip, api string, n, slow int, srcs []string, goodSrc string, d time.Duration, keepAlive bool) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t0 := time.Now()
	open, failed, served := holdFlood(ctx, &wg, vip, n, srcs, slow, keepAlive)
	time.Sleep(2 * time.Second) // refusals arrive; admitted ones stay
	kind := "idle (never send)"
	if keepAlive {
		kind = "keep-alive idle (one GET, then silent)"
	}
	fmt.Printf("flood: %d %s + %d slowloris connections from %s, dialled in %.1fs: %d served their request, %d still open, %d dials failed\n",
		n, kind, slow, strings.Join(srcs, ","), time.Since(t0).Seconds(), served.Load(), open.Load(), failed.Load())

	var goodMu, apiMu sync.Mutex
	var goodS, apiS []sample
	gd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(goodSrc)}, Timeout: 3 * time.Second}
	good := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: gd.DialContext, MaxIdleConnsPerHost: 8}}
	op := &http.Client{Timeout: 5 * time.Second}
	end := time.Now().Add(d)
	var run sync.WaitGroup
	body := `{"model":"fake-model","prompt":"hello","max_tokens":4}`
	for range 4 {
		run.Add(1)
		go func() {
			defer run.Done()
			for time.Now().Before(end) {
				t := time.Now()
				resp, err := good.Post("http://"+vip+"/v1/completions", "application/json", strings.NewReader(body))
				ok := err == nil && resp.StatusCode == 200
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				goodMu.Lock()
				goodS = append(goodS, sample{ok, time.Since(t)})
				goodMu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	if api != "" {
		run.Add(1)
		go func() {
			defer run.Done()
			for time.Now().Before(end) {
				t := time.Now()
				resp, err := op.Get("http://" + api + "/netlox/v1/config/loadbalancer/all")
				ok := err == nil && resp.StatusCode == 200
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				apiMu.Lock()
				apiS = append(apiS, sample{ok, time.Since(t)})
				apiMu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	run.Wait()
	gr, gp, gn := p99(goodS)
	fmt.Printf("good client (%s, 4 workers, %s): %d requests, success %.2f%%, p99 %.1f ms\n", goodSrc, d, gn, 100*gr, ms(gp))
	if api != "" {
		ar, ap, an := p99(apiS)
		fmt.Printf("management API (GET …/loadbalancer/all every 20 ms): %d calls, success %.2f%%, p99 %.1f ms\n", an, 100*ar, ms(ap))
		printMetrics(op, api)
	}
	cancel()
	wg.Wait()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printMetrics shows the edge family and endpoint health from /metrics.
func printMetrics(c *http.Client, api string) {
	resp, err := c.Get("http://" + api + "/metrics")
	if err != nil {
		fmt.Println("metrics:", err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "infergate_edge_") || strings.HasPrefix(l, "infergate_datapath_endpoint_health_state") {
			fmt.Println("  " + l)
		}
	}
}

func rssKiB(pid int) int64 { return statusKiB(pid, "VmRSS:") }

// statusKiB reads one kB field of /proc/PID/status (VmRSS: resident; VmData:
// the heap and other private mappings, touched or not).
func statusKiB(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field) {
			f := strings.Fields(l)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return -1
}

func runBodies(vip string, n int, declared int64, pid int) {
	idle := rssKiB(pid)
	conns := make([]net.Conn, 0, n)
	srcs := []string{"127.0.0.20", "127.0.0.21", "127.0.0.22", "127.0.0.23"} // under the per-IP cap
	for i := range n {
		c, err := dialFrom(srcs[i%len(srcs)], vip)
		if err != nil {
			fmt.Println("bodies: dial:", err)
			continue
		}
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", declared)
		conns = append(conns, c)
	}
	time.Sleep(3 * time.Second)
	during := rssKiB(pid)
	data := statusKiB(pid, "VmData:")
	peak := during
	for range 4 {
		time.Sleep(500 * time.Millisecond)
		peak = max(peak, rssKiB(pid))
	}
	for _, c := range conns {
		_ = c.Close()
	}
	time.Sleep(5 * time.Second)
	after5 := rssKiB(pid)
	time.Sleep(25 * time.Second)
	after30 := rssKiB(pid)
	fmt.Printf("bodies: %d headers-only connections declaring %d bytes: RSS idle %.1f MB, while waiting %.1f MB (peak %.1f, +%.1f MB; VmData %.1f MB), 5 s after close %.1f MB, 30 s after %.1f MB\n",
		len(conns), declared, mb(idle), mb(during), mb(peak), mb(peak-idle), mb(data), mb(after5), mb(after30))
}

func mb(kib int64) float64 { return float64(kib) / 1024 }
