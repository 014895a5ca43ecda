package pd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// NotSentError marks a leg the engine provably never received: the TCP
// connection could not be established. It is the only error the dialects
// treat as safe to retry without evidence from the engine.
type NotSentError struct{ Err error }

func (e *NotSentError) Error() string { return "request not sent: " + e.Err.Error() }
func (e *NotSentError) Unwrap() error { return e.Err }

// NotSent implements the Sender contract.
func (e *NotSentError) NotSent() bool { return true }

// HTTPSender is a plain-HTTP Sender over one http.Client. Dial failures are
// reported as *NotSentError. The datapath may bring its own Sender (pooled
// transports, PROXY protocol); this one serves tests, the fake engines and
// simple deployments.
type HTTPSender struct {
	Client *http.Client
}

// NewHTTPSender returns a sender whose transport marks dial failures.
func NewHTTPSender(dialTimeout time.Duration) *HTTPSender {
	d := &net.Dialer{Timeout: dialTimeout}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &NotSentError{Err: err}
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &HTTPSender{Client: &http.Client{Transport: tr}}
}

// Send POSTs leg.Body to http://<endpoint>/<path>.
func (s *HTTPSender) Send(ctx context.Context, leg Leg) (*http.Response, error) {
	url := "http://" + leg.Endpoint.Addr.String() + leg.Path
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(leg.Body))
	if err != nil {
		return nil, &NotSentError{Err: fmt.Errorf("build request for %s: %w", leg.Endpoint.ID, err)}
	}
	for k, v := range leg.Header {
		r.Header[k] = v
	}
	r.ContentLength = int64(len(leg.Body))
	r.Header.Set("Content-Length", strconv.Itoa(len(leg.Body)))
	resp, err := s.Client.Do(r)
	if err != nil {
		var ns *NotSentError
		if errors.As(err, &ns) {
			return nil, &NotSentError{Err: fmt.Errorf("send to %s: %w", leg.Endpoint.ID, ns.Err)}
		}
		return nil, fmt.Errorf("send to %s: %w", leg.Endpoint.ID, err)
	}
	return resp, nil
}

// Close releases idle connections.
func (s *HTTPSender) Close() { s.Client.CloseIdleConnections() }
