// Command ssebench holds many concurrent SSE completion streams through a
// proxy and reports what each costs the proxy: CPU per relayed event and RSS
// per open stream, read from /proc for the proxy's process tree (the proxy's
// pid and its children, e.g. nginx's workers). test/bench/proxy.sh runs it
// against infergate and the reference proxies in the same run.
//
// The streams are opened in batches, held until every one has delivered its
// first event (the plateau, where RSS is sampled), then read to the end.
// Every loop is bounded by -timeout; connections are loopback only.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	url := flag.String("url", "", "completion URL (http://127.0.0.1:port/v1/completions)")
	n := flag.Int("streams", 1000, "concurrent streams")
	batch := flag.Int("batch", 500, "streams opened per batch")
	gap := flag.Duration("batch-gap", 20*time.Millisecond, "pause between batches")
	pid := flag.Int("pid", 0, "proxy pid whose process tree is measured (0: none)")
	timeout := flag.Duration("timeout", 2*time.Minute, "bound on the whole run")
	label := flag.String("label", "proxy", "name printed in the result line")
	flag.Parse()
	if !strings.HasPrefix(*url, "http://127.") {
		fail(errors.New("-url must be a loopback http URL"))
	}
	raiseNoFile()
	res, err := run(*url, *n, *batch, *gap, *pid, *timeout)
	if err != nil {
		fail(err)
	}
	// One line, key=value, for proxy.sh to parse.
	fmt.Printf("%s streams=%d ok=%d errors=%d events=%d cpu_us_per_event=%.2f user_us_per_event=%.2f rss_idle_kb=%d rss_open_kb=%d rss_kb_per_stream=%.1f anon_kb_per_stream=%.1f plateau=%v first_error=%q\n",
		*label, *n, res.ok, res.errors, res.events, res.perEvent(res.cpuTicks.user+res.cpuTicks.sys), res.perEvent(res.cpuTicks.user), res.rssIdle.total, res.rssOpen.total, res.rssPerStream(*n), res.anonPerStream(*n), res.plateau, res.firstErr)
}

type result struct {
	ok, errors, events int64
	cpuTicks           ticks
	rssIdle, rssOpen   rss
	plateau            bool // every stream delivered an event while all were open
	firstErr           string
}

// perEvent is t clock ticks in µs per event relayed.
func (r result) perEvent(t int64) float64 {
	if r.events == 0 {
		return 0
	}
	return float64(t) * 1e6 / float64(clkTck) / float64(r.events)
}

func (r result) rssPerStream(n int) float64 {
	return float64(r.rssOpen.total-r.rssIdle.total) / float64(n)
}

// anonPerStream leaves out file-backed pages (the binary's text, whose
// resident share follows the page cache, not the streams).
func (r result) anonPerStream(n int) float64 {
	return float64(r.rssOpen.anon-r.rssIdle.anon) / float64(n)
}

const clkTck = 100 // USER_HZ on Linux

const body = `{"model":"fake-model","prompt":"hello","max_tokens":100,"stream":true}`

func run(url string, n, batch int, gap time.Duration, pid int, timeout time.Duration) (result, error) {
	var res result
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tr := &http.Transport{
		MaxIdleConnsPerHost: -1,
		DisableKeepAlives:   true,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		WriteBufferSize:     1 << 10,
		ReadBufferSize:      4 << 10,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	if pid > 0 {
		res.rssIdle = treeRSS(pid)
	}
	t0 := treeTicks(pid)
	var started sync.WaitGroup // each stream's first event (or its failure)
	var wg sync.WaitGroup
	var ok, errs, events atomic.Int64
	var errOnce sync.Once
	release := make(chan struct{}) // streams read past their first event only after the plateau sample
	started.Add(n)
	for i := range n {
		if i > 0 && i%batch == 0 {
			time.Sleep(gap)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := stream(ctx, client, url, &started, release)
			events.Add(got)
			if err != nil {
				errs.Add(1)
				errOnce.Do(func() { res.firstErr = err.Error() })
				return
			}
			ok.Add(1)
		}()
	}
	plateau := make(chan struct{})
	go func() { started.Wait(); close(plateau) }()
	select {
	case <-plateau:
		res.plateau = errs.Load() == 0
	case <-ctx.Done():
	}
	if pid > 0 {
		res.rssOpen = treeRSS(pid)
	}
	close(release)
	wg.Wait()
	t1 := treeTicks(pid)
	res.cpuTicks = ticks{user: t1.user - t0.user, sys: t1.sys - t0.sys}
	res.ok, res.errors, res.events = ok.Load(), errs.Load(), events.Load()
	return res, nil
}

// stream sends one streaming completion and counts its "data:" events; it
// marks started after the first event (or on failure) and then waits for
// release, so that all streams are open at the same moment.
func stream(ctx context.Context, c *http.Client, url string, started *sync.WaitGroup, release <-chan struct{}) (int64, error) {
	once := sync.OnceFunc(started.Done)
	defer once()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	br := bufio.NewReaderSize(resp.Body, 1<<10)
	var got int64
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data:")) {
			got++
			if got == 1 {
				once()
				select {
				case <-release:
				case <-ctx.Done():
					return got, ctx.Err()
				}
			}
			if bytes.HasPrefix(line, []byte("data: [DONE]")) {
				done = true
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return got, err
		}
	}
	if !done {
		return got, errors.New("stream ended without [DONE]")
	}
	return got, nil
}

// tree returns pid and its direct children (nginx's workers; Go proxies and
// HAProxy are one process, whose threads /proc/<pid>/stat already sums).
func tree(pid int) []int {
	out := []int{pid}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return out
	}
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// ticks is CPU time in clock ticks, user and system apart: the system
// time (the reads and writes) is much the same for every proxy, the user
// time is where they differ.
type ticks struct{ user, sys int64 }

// treeTicks is the clock ticks of the tree.
func treeTicks(pid int) ticks {
	var t ticks
	if pid <= 0 {
		return t
	}
	for _, p := range tree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
		u, _ := strconv.ParseInt(f[11], 10, 64)                  // 14 utime
		k, _ := strconv.ParseInt(f[12], 10, 64)                  // 15 stime
		t.user += u
		t.sys += k
	}
	return t
}

// rss is a tree's resident memory in KiB: all of it (VmRSS) and the
// anonymous part (RssAnon).
type rss struct{ total, anon int64 }

// treeRSS sums VmRSS and RssAnon over the tree.
func treeRSS(pid int) rss {
	var r rss
	for _, p := range tree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok || (k != "VmRSS" && k != "RssAnon") {
				continue
			}
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if k == "VmRSS" {
				r.total += n
			} else {
				r.anon += n
			}
		}
	}
	return r
}

func raiseNoFile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ssebench:", err)
	os.Exit(1)
}
