// Package clienttest is an in-memory fake of the management API for tests
// of the client and the CLI. It speaks the real wire shapes (paths, the
// {"lbAttr":[…]} list, {"result":"Success"}, the error envelope) and
// LoxiLB's upsert semantics, but validates almost nothing: validation is the
// rules package's job and is tested there and end to end against the real
// daemon.
package clienttest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/infergate/infergate/rules"
)

// Wire strings the fake answers with.
const (
	resultSuccess   = "Success"
	codeRuleExists  = "rule_exists"
	codeNotFound    = "rule_not_found"
	codeInvalid     = "invalid_field"
	codeMalformed   = "malformed_json"
	fieldMode       = "serviceArguments.mode"
	modeFullProxy   = 4
	hostAny         = "any"
	prefixLB        = "/netlox/v1/config/loadbalancer"
	suffixCompiled  = "/compiled"
	rejectRuleNamed = "reject-me" // a rule with this name gets a 400, to test rejections

	routeAll        = "/all"
	routeByName     = "/name/"
	routeHostURL    = "/hosturl/"
	routeByKey      = "/externalipaddress/"
	queryBlock      = "block"
	queryPathPrefix = "path_prefix"
	queryPathMatch  = "path_match_mode"
	queryModelName  = "model_name"
)

// RejectRuleNamed is the rule name the fake rejects with 400
// invalid_combination on field serviceArguments.name.
const RejectRuleNamed = rejectRuleNamed

// Request is one request the fake received.
type Request struct {
	Method string
	Path   string // with query
	Body   []byte
}

// Server is the fake API. Rules are kept in insertion order.
type Server struct {
	*httptest.Server

	mu    sync.Mutex
	rules []rules.Rule
	reqs  []Request
}

// New starts a fake on loopback and closes it when t ends.
func New(t testing.TB) *Server {
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Requests returns a copy of every request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Rules returns a copy of the stored rules.
func (s *Server) Rules() []rules.Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]rules.Rule(nil), s.rules...)
}

// Seed stores rules directly.
func (s *Server) Seed(rs ...rules.Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, rs...)
}

type key struct {
	vip, proto, host, path, match, model string
	port, portMax                        int
	block                                uint32
}

func keyOf(r rules.Rule) key {
	sa := r.ServiceArguments
	return key{vip: sa.ExternalIP, proto: sa.Protocol, host: sa.Host, path: sa.PathPrefix,
		match: rules.NormPathMatch(sa.PathMatchMode), model: sa.ModelName, port: sa.Port, portMax: sa.PortMax, block: sa.Block}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.RequestURI(), Body: body})

	p := strings.TrimPrefix(r.URL.Path, prefixLB)
	switch {
	case r.Method == http.MethodPost && p == "":
		s.post(w, body)
	case r.Method == http.MethodGet && p == routeAll:
		writeJSON(w, http.StatusOK, rules.RuleList{LbAttr: append([]rules.Rule{}, s.rules...)})
	case r.Method == http.MethodGet && strings.HasPrefix(p, routeByKey):
		s.get(w, p)
	case r.Method == http.MethodDelete && strings.HasPrefix(p, routeByName):
		name := strings.TrimPrefix(p, routeByName)
		kept := s.rules[:0]
		for _, x := range s.rules {
			if x.ServiceArguments.Name != name {
				kept = append(kept, x)
			}
		}
		if len(kept) == len(s.rules) { // as the real API: a name no rule has is 404
			writeErr(w, http.StatusNotFound, codeNotFound, "", "no rule is named "+strconv.Quote(name))
			return
		}
		s.rules = kept
		writeJSON(w, http.StatusOK, map[string]string{"result": resultSuccess})
	case r.Method == http.MethodDelete && strings.HasPrefix(p, routeHostURL):
		s.delete(w, r, p)
	default:
		writeErr(w, http.StatusNotFound, codeNotFound, "", "no such route")
	}
}

func (s *Server) post(w http.ResponseWriter, body []byte) {
	var in rules.Rule
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeErr(w, http.StatusBadRequest, codeMalformed, "", err.Error())
		return
	}
	if in.ServiceArguments.Mode != modeFullProxy {
		writeErr(w, http.StatusBadRequest, codeInvalid, fieldMode, "only mode 4 (fullproxy) is served")
		return
	}
	if in.ServiceArguments.Name == rejectRuleNamed {
		writeErr(w, http.StatusBadRequest, "invalid_combination", "serviceArguments.name", "rejected by the fake")
		return
	}
	k := keyOf(in)
	for i, x := range s.rules {
		if keyOf(x) != k {
			continue
		}
		if reflect.DeepEqual(x, in) {
			writeErr(w, http.StatusConflict, codeRuleExists, "", "rule exists")
			return
		}
		s.rules[i] = in
		writeJSON(w, http.StatusOK, map[string]string{"result": resultSuccess})
		return
	}
	s.rules = append(s.rules, in)
	writeJSON(w, http.StatusOK, map[string]string{"result": resultSuccess})
}

// parseKeyPath reads ".../externalipaddress/{ip}/port/{p}[/portmax/{m}]/protocol/{proto}[/rest]".
func parseKeyPath(p string) (vip string, port, portMax int, proto, rest string, ok bool) {
	f := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(f) < 6 || f[0] != "externalipaddress" || f[2] != "port" {
		return "", 0, 0, "", "", false
	}
	vip = f[1]
	port, _ = strconv.Atoi(f[3])
	i := 4
	if f[i] == "portmax" {
		portMax, _ = strconv.Atoi(f[i+1])
		i += 2
	}
	if len(f) < i+2 || f[i] != "protocol" {
		return "", 0, 0, "", "", false
	}
	proto = f[i+1]
	if len(f) > i+2 {
		rest = "/" + strings.Join(f[i+2:], "/")
	}
	return vip, port, portMax, proto, rest, true
}

func (s *Server) get(w http.ResponseWriter, p string) {
	vip, port, _, proto, rest, ok := parseKeyPath(p)
	if !ok || (rest != "" && rest != suffixCompiled) {
		writeErr(w, http.StatusNotFound, codeNotFound, "", "no such route")
		return
	}
	for _, x := range s.rules {
		sa := x.ServiceArguments
		if sa.ExternalIP == vip && sa.Port == port && sa.Protocol == proto {
			if rest == suffixCompiled {
				writeJSON(w, http.StatusOK, map[string]any{"Key": map[string]any{"VIP": vip, "Port": port}, "Name": sa.Name})
				return
			}
			writeJSON(w, http.StatusOK, x)
			return
		}
	}
	writeErr(w, http.StatusNotFound, codeNotFound, "", "no rule on "+vip)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, p string) {
	rest := strings.TrimPrefix(p, routeHostURL)
	host, keyPart, _ := strings.Cut(rest, "/")
	if host == hostAny {
		host = ""
	}
	vip, port, portMax, proto, tail, ok := parseKeyPath("/" + keyPart)
	if !ok || tail != "" {
		writeErr(w, http.StatusNotFound, codeNotFound, "", "no such route")
		return
	}
	q := r.URL.Query()
	block, _ := strconv.ParseUint(q.Get(queryBlock), 10, 32)
	want := key{vip: vip, proto: proto, host: host, path: q.Get(queryPathPrefix),
		match: rules.NormPathMatch(q.Get(queryPathMatch)), model: q.Get(queryModelName), port: port, portMax: portMax, block: uint32(block)}
	for i, x := range s.rules {
		if keyOf(x) == want {
			s.rules = append(s.rules[:i], s.rules[i+1:]...)
			writeJSON(w, http.StatusOK, map[string]string{"result": resultSuccess})
			return
		}
	}
	writeErr(w, http.StatusNotFound, codeNotFound, "", "no-rule error")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, field, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg, "result": msg, "error_code": code, "field": field})
}
