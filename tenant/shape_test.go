package tenant

import (
	"encoding/json"
	"testing"
)

func TestShapeReadsWhatTheEngineReads(t *testing.T) {
	cases := []struct {
		name string
		f    BodyFields
		want RequestShape
	}{
		{"nothing", BodyFields{}, RequestShape{Choices: 1}},
		{"stream true", BodyFields{Stream: []byte("true")}, RequestShape{Stream: true, Choices: 1}},
		{"stream 1 (lax bool)", BodyFields{Stream: []byte("1")}, RequestShape{Stream: true, Choices: 1}},
		{"stream \"yes\"", BodyFields{Stream: []byte(`"yes"`)}, RequestShape{Stream: true, Choices: 1}},
		{"stream false", BodyFields{Stream: []byte("false")}, RequestShape{Choices: 1}},
		{"include_usage escaped", BodyFields{Stream: []byte("true"), StreamOptions: []byte(`{"include_usag\u0065":true}`)},
			RequestShape{Stream: true, StreamOptions: true, IncludeUsage: true, Choices: 1}},
		{"include_usage last wins", BodyFields{Stream: []byte("true"), StreamOptions: []byte(`{"include_usage":true,"include_usage":false}`)},
			RequestShape{Stream: true, StreamOptions: true, Choices: 1}},
		{"Include_Usage is another name", BodyFields{Stream: []byte("true"), StreamOptions: []byte(`{"Include_Usage":true}`)},
			RequestShape{Stream: true, StreamOptions: true, Choices: 1}},
		{"stream_options null", BodyFields{StreamOptions: []byte("null")}, RequestShape{Choices: 1}},
		{"largest ceiling", BodyFields{MaxTokens: []byte("1"), MaxCompletionTokens: []byte("5000"), MaxOutputTokens: []byte("7")},
			RequestShape{MaxTokens: 5000, Choices: 1}},
		{"ceiling as float and string", BodyFields{MaxTokens: []byte("300.0"), MaxOutputTokens: []byte(`"400"`)}, RequestShape{MaxTokens: 400, Choices: 1}},
		{"bad ceilings ignored", BodyFields{MaxTokens: []byte("-5"), MaxCompletionTokens: []byte("1.5"), MaxOutputTokens: []byte("null")}, RequestShape{Choices: 1}},
		{"huge ceiling capped", BodyFields{MaxTokens: []byte("1e300")}, RequestShape{MaxTokens: maxCount, Choices: 1}},
		{"n and best_of", BodyFields{N: []byte("2"), BestOf: []byte("8")}, RequestShape{Choices: 8}},
	}
	for _, tc := range cases {
		if got := Shape(tc.f); got != tc.want {
			t.Errorf("%s: Shape = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestEstimateReservesACeilingPerChoice(t *testing.T) {
	cases := []struct {
		name        string
		promptBytes int
		s           RequestShape
		def, want   int
	}{
		{"no ceiling takes the default", 8, RequestShape{Choices: 1}, 256, 2 + 256},
		{"client ceiling", 8, RequestShape{MaxTokens: 10, Choices: 1}, 256, 2 + 10},
		{"per choice", 0, RequestShape{MaxTokens: 10, Choices: 8}, 256, 80},
		{"default per choice", 0, RequestShape{Choices: 4}, 100, 400},
		{"zero choices is one", 0, RequestShape{MaxTokens: 10}, 100, 10},
	}
	for _, tc := range cases {
		if got := Estimate(tc.promptBytes, tc.s, tc.def); got != tc.want {
			t.Errorf("%s: Estimate = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestAskForUsageWinsOverTheClient checks the rewritten body as a JSON
// decoder that keeps the last duplicate (as the engines' do) reads it.
func TestAskForUsageWinsOverTheClient(t *testing.T) {
	cases := []struct {
		name, body string
		asked      bool
		keep       map[string]any // other stream_options members that must survive
	}{
		{"absent", `{"stream":true,"prompt":"x"}`, true, nil},
		{"turned off", `{"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":false},"prompt":"x"}`, true, map[string]any{"continuous_usage_stats": false}},
		{"turned off by a duplicate", `{"stream":true,"stream_options":{"include_usage":true},"prompt":"x","stream_options":{"include_usage":false}}`, true, nil},
		{"escaped names", `{"stream":true,"strea\u006d_options":{"include_usag\u0065":false}}`, true, nil},
		{"null", `{"stream":true,"stream_options":null}`, true, nil},
		{"client asked", `{"stream":true,"stream_options":{"include_usage":true}}`, false, nil},
		{"not an object: the engine refuses it", `{"stream":true,"stream_options":"x"}`, false, nil},
	}
	for _, tc := range cases {
		var f BodyFields
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tc.body), &raw); err != nil {
			t.Fatal(err)
		}
		f.Stream, f.StreamOptions = raw["stream"], raw["stream_options"]
		out, asked := AskForUsage([]byte(tc.body), Shape(f))
		if asked != tc.asked {
			t.Fatalf("%s: asked %v, want %v", tc.name, asked, tc.asked)
		}
		if !asked {
			if string(out) != tc.body {
				t.Fatalf("%s: body changed without asking: %s", tc.name, out)
			}
			continue
		}
		var got struct {
			StreamOptions map[string]any `json:"stream_options"`
			Prompt        *string        `json:"prompt"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: rewritten body is not JSON: %v: %s", tc.name, err, out)
		}
		if got.StreamOptions["include_usage"] != true {
			t.Fatalf("%s: engine reads include_usage %v from %s", tc.name, got.StreamOptions["include_usage"], out)
		}
		for k, v := range tc.keep {
			if got.StreamOptions[k] != v {
				t.Fatalf("%s: lost stream_options.%s: %s", tc.name, k, out)
			}
		}
		if raw["prompt"] != nil && (got.Prompt == nil || *got.Prompt != "x") {
			t.Fatalf("%s: lost the prompt: %s", tc.name, out)
		}
	}
}
