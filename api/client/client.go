package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/rules"
)

// Routes under the base path. They mirror LoxiLB's so the client also talks
// to a LoxiLB gateway for everything LoxiLB has.
const (
	basePath          = "/netlox/v1"
	pathLB            = basePath + "/config/loadbalancer"
	pathLBAll         = pathLB + "/all"
	pathLBByName      = pathLB + "/name/"
	segExternalIP     = "/externalipaddress/"
	segPort           = "/port/"
	segPortMax        = "/portmax/"
	segProtocol       = "/protocol/"
	segHostURL        = "/hosturl/"
	suffixCompiled    = "/compiled"
	suffixExplain     = "/explain"
	protoTCP          = "tcp" // explain serves HTTP rules, which are TCP
	hostURLAny        = "any" // LoxiLB's hosturl for a rule without host
	queryBlock        = "block"
	queryPathPrefix   = "path_prefix"
	queryPathMatch    = "path_match_mode"
	queryModelName    = "model_name"
	contentTypeJSON   = "application/json"
	headerContentType = "Content-Type"
	headerAccept      = "Accept"
	// headerAuthorization carries the management API bearer token.
	headerAuthorization = "Authorization"
	bearerPrefix        = "Bearer "
	// errorCodeRuleExists is apierror.CodeRuleExists; repeated so the client
	// does not import server-side packages for one string.
	errorCodeRuleExists = "rule_exists"
	// maxErrorBody bounds how much of an error answer is read.
	maxErrorBody = 1 << 20
)

// Result says what Apply did.
type Result int

const (
	Created Result = iota
	Updated
	Unchanged
)

func (r Result) String() string {
	switch r {
	case Created:
		return "created"
	case Updated:
		return "updated"
	case Unchanged:
		return "unchanged"
	}
	return "result(" + strconv.Itoa(int(r)) + ")"
}

// APIError is a non-2xx answer from the server. Status is the HTTP status,
// Code the body's "code" (LoxiLB sets it to the status), ErrorCode the
// stable machine code (e.g. "invalid_combination"), Field the offending
// field path, Result LoxiLB's error text and Message a sentence for people.
type APIError struct {
	Status    int
	Code      int
	ErrorCode string
	Field     string
	Message   string
	Result    string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.Status)
	if e.ErrorCode != "" {
		b.WriteString(" " + e.ErrorCode)
	}
	if e.Field != "" {
		b.WriteString(" (field " + e.Field + ")")
	}
	msg := e.Message
	if msg == "" {
		msg = e.Result
	}
	if msg != "" {
		b.WriteString(": " + msg)
	}
	if e.Result != "" && e.Result != msg {
		b.WriteString(" [result: " + e.Result + "]")
	}
	return b.String()
}

// IsNotFound reports whether err is a 404 from the server.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// errorBody is the server's error envelope.
type errorBody struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	Result    string `json:"result"`
	ErrorCode string `json:"error_code"`
	Field     string `json:"field"`
}

// Key is a rule's full composite key: what DELETE needs to name one rule
// among several sharing VIP:port/proto (multi-model pools).
type Key struct {
	VIP           string
	Port          int
	PortMax       int
	Protocol      string
	Block         uint32
	Host          string
	PathPrefix    string
	PathMatchMode string // "" and "disabled" are the same
	ModelName     string
}

// KeyOf returns r's full key.
func KeyOf(r rules.Rule) Key {
	sa := r.ServiceArguments
	return Key{
		VIP: sa.ExternalIP, Port: sa.Port, PortMax: sa.PortMax, Protocol: sa.Protocol,
		Block: sa.Block, Host: sa.Host, PathPrefix: sa.PathPrefix,
		PathMatchMode: sa.PathMatchMode, ModelName: sa.ModelName,
	}
}

// Same reports whether k and o name the same rule, comparing the way the
// server does: VIPs as addresses, protocol case-insensitively, "disabled"
// path match mode as "".
func (k Key) Same(o Key) bool {
	return sameVIP(k.VIP, o.VIP) && k.Port == o.Port && k.PortMax == o.PortMax &&
		strings.EqualFold(k.Protocol, o.Protocol) && k.Block == o.Block && k.Host == o.Host &&
		k.PathPrefix == o.PathPrefix && rules.NormPathMatch(k.PathMatchMode) == rules.NormPathMatch(o.PathMatchMode) &&
		k.ModelName == o.ModelName
}

func sameVIP(a, b string) bool {
	pa, okA := rules.ParseIPLiteral(a)
	pb, okB := rules.ParseIPLiteral(b)
	if !okA || !okB {
		return a == b
	}
	return pa == pb
}

// Client talks to one infergate (or LoxiLB) management API.
type Client struct {
	base  string
	http  *http.Client
	token auth.Token // zero: no Authorization header
}

// WithToken makes every request carry "Authorization: Bearer <t>" and
// returns c. The token is held as a redacting secret type.
func (c *Client) WithToken(t auth.Token) *Client {
	c.token = t
	return c
}

// BearerTransport adds the management API token to requests for callers
// that speak to the API with their own http.Client (validate's scrapes). It
// must only wrap a client used for the management API: the token must never
// reach a VIP or an engine.
type BearerTransport struct {
	Base  http.RoundTripper // nil: http.DefaultTransport
	Token auth.Token
}

// RoundTrip implements http.RoundTripper.
func (b *BearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := b.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if b.Token.IsZero() {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set(headerAuthorization, bearerPrefix+b.Token.Reveal())
	return base.RoundTrip(r)
}

// IsAuthError reports whether err is the server refusing the credential
// (401) or what it may do (403), so callers can say what to do instead of
// printing a bare status.
func IsAuthError(err error) bool {
	var e *APIError
	return errors.As(err, &e) && (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden)
}

// New returns a client for baseURL (e.g. "http://127.0.0.1:11111"). A nil
// httpClient means http.DefaultClient; timeouts come from ctx or httpClient.
func New(baseURL string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: httpClient}
}

// Apply creates or updates r. LoxiLB answers 200 for both, so Apply first
// looks the key up to tell them apart; an identical re-POST (409
// rule_exists) is Unchanged, not an error. The look-up and the POST are two
// requests: a concurrent writer can make Created/Updated inaccurate, never
// the stored rule.
func (c *Client) Apply(ctx context.Context, r rules.Rule) (Result, error) {
	exists, err := c.exists(ctx, KeyOf(r))
	if err != nil {
		return 0, err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("encode rule: %w", err)
	}
	err = c.do(ctx, http.MethodPost, pathLB, body, nil)
	var ae *APIError
	switch {
	case err == nil && exists:
		return Updated, nil
	case err == nil:
		return Created, nil
	case errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.ErrorCode == errorCodeRuleExists:
		return Unchanged, nil
	}
	return 0, err
}

// exists reports whether a rule with exactly key k is stored. GET by key
// matches VIP:port/proto only (first match), so a hit with a different full
// key falls back to the list.
func (c *Client) exists(ctx context.Context, k Key) (bool, error) {
	got, err := c.Get(ctx, k.VIP, k.Port, k.Protocol)
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if KeyOf(got).Same(k) {
		return true, nil
	}
	all, err := c.List(ctx)
	if err != nil {
		return false, err
	}
	for _, r := range all {
		if KeyOf(r).Same(k) {
			return true, nil
		}
	}
	return false, nil
}

// List returns every rule (GET /config/loadbalancer/all).
func (c *Client) List(ctx context.Context) ([]rules.Rule, error) {
	var list rules.RuleList
	if err := c.do(ctx, http.MethodGet, pathLBAll, nil, &list); err != nil {
		return nil, err
	}
	return list.LbAttr, nil
}

// ListRaw returns the list body exactly as the server sent it, so fields
// this client's model lacks are not dropped (loxicmd's `get lb -o json` bug).
func (c *Client) ListRaw(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, pathLBAll, nil, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// Get returns the first rule on vip:port/proto (LoxiLB's lookup by key).
func (c *Client) Get(ctx context.Context, vip string, port int, proto string) (rules.Rule, error) {
	var r rules.Rule
	err := c.do(ctx, http.MethodGet, keyPath(pathLB, vip, port, 0, proto), nil, &r)
	return r, err
}

// GetRaw is Get returning the server's body unchanged, so fields this
// client does not model are kept.
func (c *Client) GetRaw(ctx context.Context, vip string, port int, proto string) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, keyPath(pathLB, vip, port, 0, proto), nil, &raw)
	return raw, err
}

// Compiled returns the compiled (effective, defaults resolved) form of the
// rule on vip:port/proto as the server renders it.
func (c *Client) Compiled(ctx context.Context, vip string, port int, proto string) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, keyPath(pathLB, vip, port, 0, proto)+suffixCompiled, nil, &raw)
	return raw, err
}

// Explain asks the rule on vip:port/tcp (narrowed to modelName when set)
// which endpoint it would pick for envelope ({"path","headers","body"}) and
// returns the server's JSON answer unchanged. Nothing is forwarded.
func (c *Client) Explain(ctx context.Context, vip string, port int, modelName string, envelope []byte) (json.RawMessage, error) {
	p := keyPath(pathLB, vip, port, 0, protoTCP) + suffixExplain
	if modelName != "" {
		p += "?" + url.Values{queryModelName: {modelName}}.Encode()
	}
	var raw json.RawMessage
	err := c.do(ctx, http.MethodPost, p, envelope, &raw)
	return raw, err
}

// Delete removes the rule with exactly key k. It always uses LoxiLB's
// hosturl form, which carries the whole key (host, block, path, model).
func (c *Client) Delete(ctx context.Context, k Key) error {
	host := k.Host
	if host == "" {
		host = hostURLAny
	}
	p := keyPath(pathLB+segHostURL+url.PathEscape(host), k.VIP, k.Port, k.PortMax, k.Protocol)
	q := url.Values{}
	if k.Block != 0 {
		q.Set(queryBlock, strconv.FormatUint(uint64(k.Block), 10))
	}
	if k.PathPrefix != "" {
		q.Set(queryPathPrefix, k.PathPrefix)
	}
	if m := rules.NormPathMatch(k.PathMatchMode); m != "" {
		q.Set(queryPathMatch, m)
	}
	if k.ModelName != "" {
		q.Set(queryModelName, k.ModelName)
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil)
}

// DeleteByName removes every rule named name. A name no rule has is a 404
// (IsNotFound), as a missing key is; LoxiLB answers Success there.
func (c *Client) DeleteByName(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, pathLBByName+url.PathEscape(name), nil, nil)
}

func keyPath(prefix, vip string, port, portMax int, proto string) string {
	p := prefix + segExternalIP + url.PathEscape(strings.Trim(vip, "[]")) + segPort + strconv.Itoa(port)
	if portMax != 0 {
		p += segPortMax + strconv.Itoa(portMax)
	}
	return p + segProtocol + url.PathEscape(proto)
}

// do sends one request. A 2xx body is decoded into out (when non-nil);
// anything else becomes *APIError.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set(headerContentType, contentTypeJSON)
	}
	req.Header.Set(headerAccept, contentTypeJSON)
	if !c.token.IsZero() {
		req.Header.Set(headerAuthorization, bearerPrefix+c.token.Reveal())
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// *url.Error already names the method and URL.
		return fmt.Errorf("management API unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp)
	}
	if out == nil {
		// Drain so the connection is reused; the body is {"result":"Success"}.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// decodeError turns a non-2xx answer into *APIError. Bodies that are not
// the JSON envelope (a proxy's HTML page, LoxiLB's empty 404) keep the
// status and carry their text as the message.
func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Status: resp.StatusCode, Code: resp.StatusCode}
	var eb errorBody
	if err := json.Unmarshal(raw, &eb); err == nil {
		if eb.Code != 0 {
			e.Code = eb.Code
		}
		e.ErrorCode, e.Field, e.Message, e.Result = eb.ErrorCode, eb.Field, eb.Message, eb.Result
		return e
	}
	e.Message = strings.TrimSpace(string(raw))
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}
