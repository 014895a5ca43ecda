// Package eppdataplane is a small Envoy-like data plane for benchmarks: an
// HTTP server that, for every request, asks an endpoint picker over ext_proc
// where it goes (headers and the whole body, as Envoy's FULL_DUPLEX_STREAMED
// mode hands them over), sends it to the picked engine (the next address in
// the list when the first refuses the connection), relays the response as it
// streams, and reports the response path back — the status and served
// endpoint when the headers arrive, the end when the body ends — so the
// picker's in-flight counts and breakers see what a proxied request shows.
//
// It is what the routing benchmark puts in front of the engines to compare a
// rule's choices made through the EPP with the same rule proxying itself.
// It is not a proxy to deploy: no retries beyond a refused connection, no
// timeouts of its own, plaintext only. Its policy when the EPP fails is
// fail-close (502), the GIE default.
package eppdataplane

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/test/extprocclient"
	"google.golang.org/grpc"
)

// ReasonHeader carries the EPP's refusal reason to the client.
const ReasonHeader = "x-infergate-request-dropped-reason"

// DataPlane is the http.Handler. Build it with New.
type DataPlane struct {
	cc     *grpc.ClientConn
	client *http.Client
}

// New connects to the EPP at eppAddr ("host:port").
func New(eppAddr string) (*DataPlane, error) {
	cc, err := extprocclient.Dial(eppAddr)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	tr := &http.Transport{
		// A failed dial is marked as the datapath marks it, so the fallback
		// to the next picked endpoint keys off the same type.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &upstream.DialError{Endpoint: addr, Err: err}
			}
			return c, nil
		},
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // relay bytes as the engine sent them
	}
	return &DataPlane{cc: cc, client: &http.Client{Transport: tr}}, nil
}

// Close drops the EPP connection and idle engine connections.
func (d *DataPlane) Close() error {
	d.client.CloseIdleConnections()
	return d.cc.Close()
}

// hopHeaders are not forwarded (RFC 9110 §7.6.1).
var hopHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true,
	"trailer": true, "transfer-encoding": true, "upgrade": true,
}

func (d *DataPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	hs := extprocclient.Headers(":method", r.Method, ":path", r.URL.RequestURI(), ":authority", r.Host, ":scheme", "http",
		"content-length", strconv.Itoa(len(body)))
	for k, vv := range r.Header {
		lk := strings.ToLower(k)
		if hopHeaders[lk] || lk == "content-length" {
			continue
		}
		for _, v := range vv {
			hs = append(hs, extprocclient.Header{Key: lk, Value: v})
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		hs = append(hs, extprocclient.Header{Key: "x-forwarded-for", Value: host})
	}
	x, err := extprocclient.Start(r.Context(), d.cc, extprocclient.Request{Headers: hs, Body: body})
	if err != nil {
		http.Error(w, "endpoint picker: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer x.Close()
	p, err := x.Pick()
	if err != nil {
		http.Error(w, "endpoint picker: "+err.Error(), http.StatusBadGateway)
		return
	}
	if p.Status != 0 {
		w.Header().Set(ReasonHeader, p.Reason)
		http.Error(w, p.Reason, p.Status)
		_ = x.Finish()
		return
	}
	if p.Body != nil {
		body = p.Body // Envoy forwards the body the EPP streamed back
	}
	for i, ep := range p.Endpoints {
		resp, err := d.send(r, ep, body, p.Headers)
		if err != nil {
			if upstream.NotSent(err) && i+1 < len(p.Endpoints) {
				continue // the fallback list is for exactly this
			}
			_ = x.ResponseHeaders(http.StatusBadGateway, ep, false)
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			_ = x.Finish()
			return
		}
		d.relay(w, resp, x, ep)
		return
	}
}

// send forwards the request to ep with the picker's header mutations.
func (d *DataPlane) send(r *http.Request, ep string, body []byte, set map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+ep+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vv := range r.Header {
		if !hopHeaders[strings.ToLower(k)] {
			req.Header[k] = vv
		}
	}
	for k, v := range set {
		// The length and the pseudo-headers (a GIE EPP echoes every request
		// header, ":path" included) are the proxy's own, not the picker's.
		if !strings.EqualFold(k, "content-length") && !strings.HasPrefix(k, ":") {
			req.Header.Set(k, v)
		}
	}
	req.Host = r.Host
	return d.client.Do(req)
}

// relay streams the engine's response to the client, flushing each read (SSE
// events go out as they come), and tells the EPP when it started and ended.
func (d *DataPlane) relay(w http.ResponseWriter, resp *http.Response, x *extprocclient.Exchange, ep string) {
	defer resp.Body.Close()
	_ = x.ResponseHeaders(resp.StatusCode, ep, true)
	for k, vv := range resp.Header {
		if !hopHeaders[strings.ToLower(k)] {
			w.Header()[k] = vv
		}
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client left; the deferred Close cancels the stream
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			break
		}
	}
	_ = x.ResponseBody(nil, true)
	_ = x.Finish()
}
