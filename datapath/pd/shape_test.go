package pd

import (
	"encoding/json"
	"testing"
)

func TestCheckNAndMultiShape(t *testing.T) {
	tests := []struct {
		path, body string
		badN       bool
		shape      string
	}{
		{"/v1/completions", `{"prompt":"x"}`, false, ""},
		{"/v1/completions", `{"prompt":"x","n":1}`, false, ""},
		{"/v1/completions", `{"prompt":"x","n":null}`, false, ""},
		{"/v1/completions", `{"prompt":"x","n":3}`, false, ShapeN},
		{"/v1/completions", `{"prompt":"x","n":0}`, true, ""},
		{"/v1/completions", `{"prompt":"x","n":-2}`, true, ""},
		{"/v1/completions", `{"prompt":"x","n":"3"}`, true, ""},
		{"/v1/completions", `{"prompt":"x","n":2.5}`, true, ""},
		{"/v1/completions", `{"prompt":"x","best_of":4}`, false, ShapeBestOf},
		{"/v1/completions", `{"prompt":"x","best_of":1}`, false, ""},
		{"/v1/completions", `{"prompt":"x","use_beam_search":true}`, false, ShapeBeamSearch},
		{"/v1/completions", `{"prompt":["a","b"]}`, false, ShapePromptList},
		{"/v1/completions", `{"prompt":[[1,2],[3]]}`, false, ShapePromptList},
		{"/v1/completions", `{"prompt":[1,2,3]}`, false, ""},        // one tokenised prompt
		{"/v1/completions", `{"prompt":["only"]}`, false, ""},       // a batch of one
		{"/v1/chat/completions", `{"prompt":["a","b"]}`, false, ""}, // chat has no prompt lists
	}
	for _, tc := range tests {
		o, err := parseObject([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := checkN(&o) != nil; got != tc.badN {
			t.Errorf("checkN(%s) error = %v, want %v", tc.body, got, tc.badN)
		}
		if tc.badN {
			continue
		}
		if got := multiShape(&o, tc.path); got != tc.shape {
			t.Errorf("multiShape(%s %s) = %q, want %q", tc.path, tc.body, got, tc.shape)
		}
	}
}

func TestFanOutUnits(t *testing.T) {
	tests := []struct {
		body    string
		want    []string // unit bodies in index order
		first   []bool
		tooWide bool
	}{
		{`{"prompt":"x","n":2}`, []string{`{"prompt":"x","n":1}`, `{"prompt":"x","n":1}`}, []bool{true, false}, false},
		{`{"prompt":["a","b"],"n":2}`, []string{`{"prompt":"a","n":1}`, `{"prompt":"a","n":1}`, `{"prompt":"b","n":1}`, `{"prompt":"b","n":1}`}, []bool{true, false, true, false}, false},
		{`{"prompt":["a",[7,8]]}`, []string{`{"prompt":"a","n":1}`, `{"prompt":[7,8],"n":1}`}, []bool{true, true}, false},
		{`{"prompt":"x","n":33}`, nil, nil, true},
	}
	for _, tc := range tests {
		o, _ := parseObject([]byte(tc.body))
		units, err := fanOutUnits(&o, "/v1/completions")
		if tc.tooWide {
			if err == nil {
				t.Errorf("%s: want a too-wide error", tc.body)
			}
			continue
		}
		if err != nil || len(units) != len(tc.want) {
			t.Fatalf("%s: %d units, err %v", tc.body, len(units), err)
		}
		for i, u := range units {
			if string(u.obj.raw) != tc.want[i] || u.index != i || u.first != tc.first[i] {
				t.Errorf("%s unit %d = %s index %d first %v, want %s %d %v", tc.body, i, u.obj.raw, u.index, u.first, tc.want[i], i, tc.first[i])
			}
		}
	}
}

func TestFanOutRewriteChunk(t *testing.T) {
	m := &fanMerger{sse: true}
	u := fanUnit{index: 2, first: false}
	out, usageOnly := m.rewriteChunk([]byte(`{"id":"a","choices":[{"index":0,"text":"x"}]}`), u)
	if usageOnly || string(out) != `{"id":"a","choices":[{"index":2,"text":"x"}]}` {
		t.Fatalf("first chunk: %s", out)
	}
	out, _ = m.rewriteChunk([]byte(`{"id":"b","choices":[{"index":0,"text":"y"}]}`), fanUnit{index: 1})
	if string(out) != `{"id":"a","choices":[{"index":1,"text":"y"}]}` {
		t.Fatalf("later chunk keeps the first id: %s", out)
	}
	_, usageOnly = m.rewriteChunk([]byte(`{"id":"b","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}`), u)
	_, _ = m.rewriteChunk([]byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}`), fanUnit{first: true})
	if !usageOnly || string(m.sumUsage()) != `{"completion_tokens":7,"prompt_tokens":5,"total_tokens":12}` {
		t.Fatalf("usage: %v %s", usageOnly, m.sumUsage())
	}
}

// FuzzShapeAndFanOut: shape detection, unit splitting and chunk rewriting
// never panic, and what they produce from a JSON object is a JSON object.
func FuzzShapeAndFanOut(f *testing.F) {
	for _, s := range []string{
		`{"prompt":["a","b"],"n":2}`, `{"prompt":"x","n":3,"best_of":4}`, `{"choices":[{"index":0,"text":"x"}],"id":"a"}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, `{"n":1e3}`, `{"prompt":[[1],[2,3]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseObject(b)
		if err != nil {
			return
		}
		_ = multiShape(&o, "/v1/completions")
		if checkN(&o) == nil {
			units, err := fanOutUnits(&o, "/v1/completions")
			if err == nil {
				for _, u := range units {
					if !json.Valid(u.obj.raw) {
						t.Fatalf("unit body is not JSON: %s", u.obj.raw)
					}
				}
			}
		}
		m := &fanMerger{sse: true}
		out, usageOnly := m.rewriteChunk(b, fanUnit{index: 3})
		if !usageOnly && !json.Valid(out) {
			t.Fatalf("rewritten chunk is not JSON: %s from %s", out, b)
		}
	})
}
