package upstream

// The engine response parser as it was before the head was read whole
// (d9e5a97), kept as the oracle of TestReadResponseDifferential and
// FuzzReadResponse: the parser that replaced it must frame and report every
// head the same way.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/infergate/infergate/datapath/hop"
)

// oldCommonHeaders interns the header names engines send (canonical and the
// lowercase spelling uvicorn and other ASGI servers use), so parsing them
// allocates no key strings. Read-only after package initialisation.
var oldCommonHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		headerContentType, headerContentLength, headerTE, headerConnection, "Date", "Server",
		"Keep-Alive", "Cache-Control", "Content-Encoding", "Vary", "Trailer", headerRequestID,
		"X-Accel-Buffering",
	} {
		m[k] = k
		m[strings.ToLower(k)] = k
	}
	return m
}()

// oldReadResponseInto is readResponse into ur's storage: the response is
// ur.resp, single header values share ur.vals and a Content-Length body is
// framed by ur.lb, so one engine response is one allocation (plus its head
// string).
func oldReadResponseInto(ur *response, br *bufio.Reader, method string, h http.Header) (io.Reader, error) {
	line, err := oldReadHeadLine(br)
	if err != nil {
		return nil, err
	}
	// Every string of the head (status line, header values) is cut from one
	// allocation; line is only valid until the next read, so copy it first.
	var scratch [512]byte
	buf := append(scratch[:0], line...)
	statusEnd := len(buf)
	// A name not interned is cut from the head string too (keyStart <
	// keyEnd) and canonicalised once the head is a string, which allocates
	// nothing when the engine already spelled it canonically.
	type field struct {
		key              string
		keyStart, keyEnd int
		start, end       int
	}
	var fa [16]field
	fields := fa[:0]
	for {
		l, err := oldReadHeadLine(br)
		if err != nil {
			return nil, err
		}
		if len(l) == 0 {
			break
		}
		i := bytes.IndexByte(l, ':')
		if i <= 0 || !oldValidHeaderKey(l[:i]) {
			return nil, fmt.Errorf("%w: header line %q", errBadResponse, l)
		}
		f := field{}
		if key, ok := oldCommonHeaders[string(l[:i])]; ok {
			if h != nil && key == headerRequestID {
				continue // into the client's map: the client's id stays, alone
			}
			f.key = key
		} else {
			f.keyStart = len(buf)
			buf = append(buf, l[:i]...)
			f.keyEnd = len(buf)
		}
		v := oldTrimOWS(l[i+1:])
		f.start, f.end = len(buf), len(buf)+len(v)
		fields = append(fields, f)
		buf = append(buf, v...)
	}
	head := string(buf)
	n := 0
	for _, f := range fields {
		if f.keyEnd > f.keyStart {
			f.key = textproto.CanonicalMIMEHeaderKey(head[f.keyStart:f.keyEnd])
			if h != nil && f.key == headerRequestID {
				continue // a spelling the table does not hold
			}
		}
		fields[n] = f
		n++
	}
	fields = fields[:n]

	proto, status, ok := strings.Cut(head[:statusEnd], " ")
	major, minor, vok := http.ParseHTTPVersion(proto)
	if !ok || !vok || len(status) < 3 || (len(status) > 3 && status[3] != ' ') {
		return nil, fmt.Errorf("%w: status line %q", errBadResponse, head[:statusEnd])
	}
	code, err := strconv.Atoi(status[:3])
	if err != nil || code < 100 {
		return nil, fmt.Errorf("%w: status line %q", errBadResponse, head[:statusEnd])
	}
	resp := &ur.resp
	*resp = http.Response{
		Status: status, StatusCode: code, Proto: proto, ProtoMajor: major, ProtoMinor: minor,
		Header: h,
	}
	if h == nil {
		resp.Header = make(http.Header, len(fields))
	}
	vals := ur.vals[:] // one backing array for the usual single values
	if len(fields) > len(vals) {
		vals = make([]string, len(fields))
	}
	for k, f := range fields {
		v := head[f.start:f.end]
		if prior, ok := resp.Header[f.key]; ok {
			resp.Header[f.key] = append(prior, v)
			continue
		}
		vals[k] = v
		resp.Header[f.key] = vals[k : k+1 : k+1]
	}
	return oldFrameBody(br, method, resp, &ur.lb)
}

// oldFrameBody sets ContentLength and Close and returns the body reader; a
// Content-Length body is framed by lb (the caller's storage).
func oldFrameBody(br *bufio.Reader, method string, resp *http.Response, lb *lengthBody) (io.Reader, error) {
	h := resp.Header
	resp.Close = hop.HasToken(h[headerConnection], "close") ||
		(resp.ProtoMajor == 1 && resp.ProtoMinor == 0 && !hop.HasToken(h[headerConnection], "keep-alive"))
	code := resp.StatusCode
	if code/100 == 1 || code == http.StatusNoContent || code == http.StatusNotModified ||
		method == http.MethodHead {
		return http.NoBody, nil
	}
	if te := h[headerTE]; len(te) > 0 {
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return nil, fmt.Errorf("%w: unsupported transfer encoding %q", errBadResponse, te)
		}
		delete(h, headerTE) // as net/http: the framing is ours, not the header's
		delete(h, headerContentLength)
		resp.TransferEncoding = []string{"chunked"}
		resp.ContentLength = -1
		return &chunkedBody{cr: httputil.NewChunkedReader(br), br: br}, nil
	}
	if cl := h[headerContentLength]; len(cl) > 0 {
		n, err := strconv.ParseInt(cl[0], 10, 64)
		for _, v := range cl[1:] {
			if v != cl[0] {
				err = errors.New("conflicting values")
			}
		}
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: Content-Length %q", errBadResponse, cl)
		}
		resp.ContentLength = n
		if n == 0 {
			return http.NoBody, nil
		}
		*lb = lengthBody{r: br, n: n}
		return lb, nil
	}
	resp.ContentLength = -1
	resp.Close = true // the end of the body is the end of the connection
	return br, nil
}

// oldReadHeadLine returns one head line without its CRLF (valid until the next
// read); a line longer than the buffer is an error.
func oldReadHeadLine(br *bufio.Reader) ([]byte, error) {
	l, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: header line too long", errBadResponse)
		}
		if errors.Is(err, io.EOF) && len(l) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

// oldTrimOWS strips the optional whitespace around a header value (bytes.Trim
// builds its cutset on every call).
func oldTrimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// oldValidHeaderKey reports whether k is a non-empty RFC 9110 token.
func oldValidHeaderKey(k []byte) bool {
	for _, b := range k {
		if !tokenChars[b] {
			return false
		}
	}
	return len(k) > 0
}
