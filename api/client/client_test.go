package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/api/client/clienttest"
	"github.com/infergate/infergate/rules"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func rule(vip string, port int, model string, weight int) rules.Rule {
	return rules.Rule{
		ServiceArguments: rules.ServiceArguments{ExternalIP: vip, Port: port, Protocol: "tcp", Mode: 4, ModelName: model, Name: "pool"},
		Endpoints:        []rules.Endpoint{{EndpointIP: "127.0.0.2", TargetPort: 8000, Weight: weight}},
	}
}

func TestApplyOutcomes(t *testing.T) {
	fake := clienttest.New(t)
	c := client.New(fake.URL, fake.Client())
	ctx := testCtx(t)

	steps := []struct {
		name string
		rule rules.Rule
		want client.Result
	}{
		{"create", rule("127.0.0.10", 8080, "", 1), client.Created},
		{"identical re-POST", rule("127.0.0.10", 8080, "", 1), client.Unchanged},
		{"weight change", rule("127.0.0.10", 8080, "", 2), client.Updated},
		// Same VIP:port/proto, other model: GET by key hits the first rule,
		// so Apply must look further before calling it an update.
		{"second model on same VIP", rule("127.0.0.10", 8080, "llama", 1), client.Created},
		{"second model updated", rule("127.0.0.10", 8080, "llama", 3), client.Updated},
		{"ipv6 create", rule("::1", 8080, "", 1), client.Created},
		{"ipv6 unchanged", rule("::1", 8080, "", 1), client.Unchanged},
	}
	for _, st := range steps {
		got, err := c.Apply(ctx, st.rule)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got != st.want {
			t.Fatalf("%s: got %v, want %v", st.name, got, st.want)
		}
	}
	if n := len(fake.Rules()); n != 3 {
		t.Fatalf("stored %d rules, want 3", n)
	}
}

func TestApplyRejected(t *testing.T) {
	fake := clienttest.New(t)
	c := client.New(fake.URL, fake.Client())
	r := rule("127.0.0.10", 8080, "", 1)
	r.ServiceArguments.Mode = 0
	_, err := c.Apply(testCtx(t), r)
	var ae *client.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want *APIError", err)
	}
	if ae.Status != 400 || ae.Code != 400 || ae.ErrorCode != "invalid_field" || ae.Field != "serviceArguments.mode" {
		t.Fatalf("APIError = %+v", ae)
	}
	for _, want := range []string{"HTTP 400", "invalid_field", "serviceArguments.mode", "fullproxy"} {
		if !strings.Contains(ae.Error(), want) {
			t.Errorf("Error() = %q lacks %q", ae.Error(), want)
		}
	}
}

func TestGetListCompiled(t *testing.T) {
	fake := clienttest.New(t)
	fake.Seed(rule("127.0.0.10", 8080, "", 1), rule("127.0.0.11", 9090, "", 2))
	c := client.New(fake.URL, fake.Client())
	ctx := testCtx(t)

	all, err := c.List(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("List = %v, %v", all, err)
	}
	raw, err := c.ListRaw(ctx)
	if err != nil || !strings.Contains(string(raw), `"lbAttr"`) {
		t.Fatalf("ListRaw = %s, %v", raw, err)
	}
	got, err := c.Get(ctx, "127.0.0.11", 9090, "tcp")
	if err != nil || got.Endpoints[0].Weight != 2 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	raw, err = c.GetRaw(ctx, "127.0.0.11", 9090, "tcp")
	if err != nil || !strings.Contains(string(raw), `"weight":2`) {
		t.Fatalf("GetRaw = %s, %v", raw, err)
	}
	if _, err := c.Get(ctx, "127.0.0.12", 1, "tcp"); !client.IsNotFound(err) {
		t.Fatalf("Get missing: err = %v, want not found", err)
	}
	comp, err := c.Compiled(ctx, "127.0.0.10", 8080, "tcp")
	if err != nil || !strings.Contains(string(comp), `"Name":"pool"`) {
		t.Fatalf("Compiled = %s, %v", comp, err)
	}
}

// TestDeletePaths pins the exact request each key produces: the server
// needs the whole key to pick one of several rules on a VIP:port.
func TestDeletePaths(t *testing.T) {
	tests := []struct {
		name string
		key  client.Key
		want string
	}{
		{"plain", client.Key{VIP: "127.0.0.10", Port: 80, Protocol: "tcp"},
			"/netlox/v1/config/loadbalancer/hosturl/any/externalipaddress/127.0.0.10/port/80/protocol/tcp"},
		{"full key", client.Key{VIP: "127.0.0.10", Port: 80, Protocol: "tcp", Host: "h.example", Block: 3,
			PathPrefix: "/v1", PathMatchMode: "prefix", ModelName: "llama 3"},
			"/netlox/v1/config/loadbalancer/hosturl/h.example/externalipaddress/127.0.0.10/port/80/protocol/tcp?block=3&model_name=llama+3&path_match_mode=prefix&path_prefix=%2Fv1"},
		{"disabled match mode is omitted", client.Key{VIP: "127.0.0.10", Port: 80, Protocol: "tcp", PathMatchMode: "disabled"},
			"/netlox/v1/config/loadbalancer/hosturl/any/externalipaddress/127.0.0.10/port/80/protocol/tcp"},
		{"port range", client.Key{VIP: "127.0.0.10", Port: 80, PortMax: 90, Protocol: "tcp"},
			"/netlox/v1/config/loadbalancer/hosturl/any/externalipaddress/127.0.0.10/port/80/portmax/90/protocol/tcp"},
		{"ipv6 brackets stripped", client.Key{VIP: "[::1]", Port: 80, Protocol: "tcp"},
			"/netlox/v1/config/loadbalancer/hosturl/any/externalipaddress/::1/port/80/protocol/tcp"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := clienttest.New(t)
			c := client.New(fake.URL, fake.Client())
			_ = c.Delete(testCtx(t), tc.key) // 404 from the empty fake is fine here
			reqs := fake.Requests()
			if len(reqs) != 1 || reqs[0].Method != http.MethodDelete || reqs[0].Path != tc.want {
				t.Fatalf("requests = %+v, want DELETE %s", reqs, tc.want)
			}
		})
	}
}

func TestDeleteRoundTrip(t *testing.T) {
	fake := clienttest.New(t)
	a, b := rule("127.0.0.10", 80, "", 1), rule("127.0.0.10", 80, "llama", 1)
	b.ServiceArguments.Host, b.ServiceArguments.Block = "h.example", 7
	fake.Seed(a, b)
	c := client.New(fake.URL, fake.Client())
	ctx := testCtx(t)
	if err := c.Delete(ctx, client.KeyOf(b)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, client.KeyOf(b)); !client.IsNotFound(err) {
		t.Fatalf("second delete: err = %v, want not found", err)
	}
	left := fake.Rules()
	if len(left) != 1 || left[0].ServiceArguments.ModelName != "" {
		t.Fatalf("left = %+v, want only the model-less rule", left)
	}
	if err := c.DeleteByName(ctx, "pool"); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Rules()); n != 0 {
		t.Fatalf("%d rules left after delete by name", n)
	}
}

// TestNonJSONError keeps the status of answers that are not the envelope
// (LoxiLB's empty 404, a proxy's HTML page).
func TestNonJSONError(t *testing.T) {
	tests := []struct {
		status  int
		body    string
		wantMsg string
	}{
		{http.StatusNotFound, "", "Not Found"},
		{http.StatusBadGateway, "<html>bad gateway</html>", "<html>bad gateway</html>"},
	}
	for _, tc := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		_, err := client.New(srv.URL, srv.Client()).List(testCtx(t))
		srv.Close()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Message != tc.wantMsg {
			t.Fatalf("status %d: err = %#v", tc.status, err)
		}
	}
}

func TestKeySame(t *testing.T) {
	base := client.Key{VIP: "::1", Port: 80, Protocol: "tcp"}
	tests := []struct {
		name string
		o    client.Key
		want bool
	}{
		{"identical", base, true},
		{"vip spelled differently", client.Key{VIP: "0:0::1", Port: 80, Protocol: "TCP"}, true},
		{"bracketed vip", client.Key{VIP: "[::1]", Port: 80, Protocol: "tcp"}, true},
		{"disabled equals empty", client.Key{VIP: "::1", Port: 80, Protocol: "tcp", PathMatchMode: "disabled"}, true},
		{"model differs", client.Key{VIP: "::1", Port: 80, Protocol: "tcp", ModelName: "m"}, false},
		{"block differs", client.Key{VIP: "::1", Port: 80, Protocol: "tcp", Block: 1}, false},
		{"port differs", client.Key{VIP: "::1", Port: 81, Protocol: "tcp"}, false},
	}
	for _, tc := range tests {
		if got := base.Same(tc.o); got != tc.want {
			t.Errorf("%s: Same = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestResultString(t *testing.T) {
	for r, want := range map[client.Result]string{client.Created: "created", client.Updated: "updated", client.Unchanged: "unchanged"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), want)
		}
	}
}

// TestExplainRequest pins the one request Explain sends: POST to the rule's
// …/protocol/tcp/explain route (brackets stripped, model as a query) with
// the envelope as the JSON body, and the answer returned unchanged.
func TestExplainRequest(t *testing.T) {
	const envelope = `{"path":"/v1/completions","body":{"prompt":"hi"}}`
	const answer = `{"chosen":"127.0.0.2:8000"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wantPath := "/netlox/v1/config/loadbalancer/externalipaddress/::1/port/8080/protocol/tcp/explain"
		if r.Method != http.MethodPost || r.URL.Path != wantPath || r.URL.Query().Get("model_name") != "llama" ||
			r.Header.Get("Content-Type") != "application/json" || string(body) != envelope {
			t.Errorf("got %s %s?%s (%s) %q", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), body)
		}
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	got, err := client.New(srv.URL, srv.Client()).Explain(testCtx(t), "[::1]", 8080, "llama", []byte(envelope))
	if err != nil || string(got) != answer {
		t.Fatalf("Explain = %s, %v; want %s", got, err, answer)
	}
}
