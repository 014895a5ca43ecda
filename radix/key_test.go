package radix

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

func TestCompletionKey(t *testing.T) {
	tests := []struct {
		name    string
		prompt  string
		want    string
		wantErr error
	}{
		{name: "plain string", prompt: `"Hello world"`, want: "Hello world"},
		{name: "leading whitespace", prompt: " \n\"hi\"", want: "hi"},
		{name: "escapes decoded", prompt: `"a\"b\\c\/d\n\t\u00e9"`, want: "a\"b\\c/d\n\té"},
		{name: "surrogate pair", prompt: `"\ud83d\ude00"`, want: "😀"},
		{name: "lone surrogate", prompt: `"\ud83dx"`, want: "\uFFFDx"},
		{name: "marker bytes escaped", prompt: `"a\u001eb"`, want: "a\x1c\x5eb"},
		{name: "raw marker bytes escaped", prompt: "\"a\x1fb\"", want: "a\x1c\x5fb"},
		{name: "token ids", prompt: `[1, 2, 65536]`, want: "\xff\x01\x00\x00\x00\x02\x00\x00\x00\x00\x00\x01\x00"},
		{name: "max token id", prompt: `[4294967295]`, want: "\xff\xff\xff\xff\xff"},
		{name: "batch of strings keys by first", prompt: `["first", "second"]`, want: "first"},
		{name: "batch of token arrays keys by first", prompt: `[[7],[8]]`, want: "\xff\x07\x00\x00\x00"},
		{name: "empty string", prompt: `""`, wantErr: ErrNoKey},
		{name: "empty array", prompt: `[]`, wantErr: ErrNoKey},
		{name: "empty inner array", prompt: `[[]]`, wantErr: ErrNoKey},
		{name: "null", prompt: `null`, wantErr: ErrNoKey},
		{name: "absent", prompt: ``, wantErr: ErrNoKey},
		{name: "number", prompt: `42`, wantErr: ErrMalformed},
		{name: "object", prompt: `{"a":1}`, wantErr: ErrMalformed},
		{name: "negative token", prompt: `[-1]`, wantErr: ErrMalformed},
		{name: "token too large", prompt: `[4294967296]`, wantErr: ErrMalformed},
		{name: "float token", prompt: `[1.5]`, wantErr: ErrMalformed},
		{name: "unterminated", prompt: `"abc`, wantErr: ErrMalformed},
		{name: "bad escape", prompt: `"a\qb"`, wantErr: ErrMalformed},
		{name: "truncated unicode escape", prompt: `"a\u00"`, wantErr: ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CompletionKey(json.RawMessage(tc.prompt))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("CompletionKey(%s) err = %v, want %v", tc.prompt, err, tc.wantErr)
			}
			if err == nil && string(got) != tc.want {
				t.Errorf("CompletionKey(%s) = %q, want %q", tc.prompt, got, tc.want)
			}
		})
	}
}

func TestChatKey(t *testing.T) {
	tests := []struct {
		name     string
		messages string
		want     string
		wantErr  error
	}{
		{
			name:     "system and user",
			messages: `[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]`,
			want:     "\x1esystem\x1fBe brief.\x1euser\x1fHi",
		},
		{
			name:     "field order and extra fields do not matter",
			messages: `[{"name":"x","content":"Hi","tool_calls":[{"a":"]"}],"role":"user"}]`,
			want:     "\x1euser\x1fHi",
		},
		{
			name:     "single text part equals string content",
			messages: `[{"role":"user","content":[{"type":"text","text":"Hi"}]}]`,
			want:     "\x1euser\x1fHi",
		},
		{
			name:     "several parts",
			messages: `[{"role":"user","content":[{"text":"a","type":"text"},{"type":"image_url","image_url":{"url":"u"}}]}]`,
			want:     "\x1euser\x1fa\x1d\x1aimage_url\x1f" + `{"type":"image_url","image_url":{"url":"u"}}`,
		},
		{
			name:     "null content",
			messages: `[{"role":"assistant","content":null,"tool_calls":[]},{"role":"tool","content":"42"}]`,
			want:     "\x1eassistant\x1f\x1etool\x1f42",
		},
		{
			name:     "role after content wins",
			messages: `[{"role":"user","content":"a","role":"assistant"}]`,
			want:     "\x1eassistant\x1fa",
		},
		{
			name:     "last content wins",
			messages: `[{"role":"user","content":[{"type":"text","text":"a"}],"content":"b"},{"role":"x","content":null}]`,
			want:     "\x1euser\x1fb\x1ex\x1f",
		},
		{
			name:     "no role",
			messages: `[{"content":"x"}]`,
			want:     "\x1e\x1fx",
		},
		{
			name:     "escaped content",
			messages: `[{"role":"user","content":"line\nnext \u001e"}]`,
			want:     "\x1euser\x1fline\nnext \x1c\x5e",
		},
		{name: "empty array", messages: `[]`, wantErr: ErrNoKey},
		{name: "null", messages: `null`, wantErr: ErrNoKey},
		{name: "absent", messages: ``, wantErr: ErrNoKey},
		{name: "not an array", messages: `{"role":"user"}`, wantErr: ErrMalformed},
		{name: "message not an object", messages: `["hi"]`, wantErr: ErrMalformed},
		{name: "role not a string", messages: `[{"role":1,"content":"x"}]`, wantErr: ErrMalformed},
		{name: "content a number", messages: `[{"role":"user","content":5}]`, wantErr: ErrMalformed},
		{name: "missing comma", messages: `[{"role":"user"} {"role":"user"}]`, wantErr: ErrMalformed},
		{name: "unterminated", messages: `[{"role":"user","content":"x"`, wantErr: ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChatKey(json.RawMessage(tc.messages))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ChatKey err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && string(got) != tc.want {
				t.Errorf("ChatKey = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestChatKeySharedHistory: conversations with the same system prompt and
// history share exactly the bytes up to where they diverge.
func TestChatKeySharedHistory(t *testing.T) {
	a, err := ChatKey(json.RawMessage(`[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is 2+2?"},{"role":"assistant","content":"4"},{"role":"user","content":"And 3+3?"}]`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ChatKey(json.RawMessage(`[{"role":"system","content":[{"type":"text","text":"You are a helpful assistant."}]},{"role":"user","content":"What is 2+2?"},{"role":"assistant","content":"4"},{"role":"user","content":"And 4+4?"}]`))
	if err != nil {
		t.Fatal(err)
	}
	prefix := "\x1esystem\x1fYou are a helpful assistant.\x1euser\x1fWhat is 2+2?\x1eassistant\x1f4\x1euser\x1fAnd "
	if common := commonPrefix(a, b); common != len(prefix) || string(a[:common]) != prefix {
		t.Errorf("common prefix %q, want %q", a[:common], prefix)
	}
}

func TestKeyLimit(t *testing.T) {
	tests := []struct {
		name  string
		build func(limit int) ([]byte, error)
		limit int
		want  string
	}{
		{"completion string", func(l int) ([]byte, error) { return AppendCompletionKey([]byte("pre"), json.RawMessage(`"abcdef"`), l) }, 3, "preabc"},
		{"completion tokens", func(l int) ([]byte, error) {
			return AppendCompletionKey(nil, json.RawMessage(`[1,2,3,4]`), l)
		}, 5, "\xff\x01\x00\x00\x00"},
		{"chat stops after limit, ignoring a malformed tail", func(l int) ([]byte, error) {
			return AppendChatKey(nil, json.RawMessage(`[{"role":"user","content":"abcdef"}, garbage`), l)
		}, 8, "\x1euser\x1fab"},
		{"no limit", func(l int) ([]byte, error) { return AppendCompletionKey(nil, json.RawMessage(`"abcdef"`), l) }, 0, "abcdef"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.build(tc.limit)
			if err != nil || string(got) != tc.want {
				t.Errorf("got (%q, %v), want %q", got, err, tc.want)
			}
		})
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// FuzzCompletionKey checks the builder never panics and decodes strings as
// encoding/json does, for inputs encoding/json accepts as valid UTF-8.
func FuzzCompletionKey(f *testing.F) {
	for _, s := range []string{`"\ud83d\ude00\ud83d\ude00\ud83d\ude00\ud83d\ude00\ud83d\ude00"`, `"hi"`, `"a\u00e9\ud83d\ude00\n"`, `[1,2,3]`, `["a","b"]`, `[[1],[2]]`, `null`, `"\ud800"`, `"\u001e"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := CompletionKey(in)
		for _, limit := range []int{1, 2, 5, 17} {
			cut, cutErr := AppendCompletionKey(nil, in, limit)
			if err == nil && (cutErr != nil || string(cut) != string(got[:min(limit, len(got))])) {
				t.Fatalf("limit %d: (%q, %v), want prefix of %q", limit, cut, cutErr, got)
			}
		}
		var s string
		if json.Unmarshal(in, &s) != nil || !utf8.Valid(in) {
			return
		}
		want := appendEscaped(nil, []byte(s))
		if s == "" {
			if !errors.Is(err, ErrNoKey) {
				t.Fatalf("CompletionKey(%q) err = %v, want ErrNoKey", in, err)
			}
			return
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("CompletionKey(%q) = (%q, %v), want %q", in, got, err, want)
		}
	})
}

// FuzzChatKey checks the builder never panics, and that every message's
// string content appears in the key when encoding/json accepts the input.
func FuzzChatKey(f *testing.F) {
	for _, s := range []string{
		`[{"role":"system","content":"s"},{"role":"user","content":"u"}]`,
		`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]`,
		`[{"role":"assistant","content":null,"tool_calls":[{"id":"1","function":{"arguments":"{\"a\":[1]}"}}]}]`,
		`[]`, `null`, `[{}]`,
	} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		limit = max(limit, 0) % 4096
		got, err := AppendChatKey(nil, in, limit)
		if limit > 0 && len(got) > limit {
			t.Fatalf("key of %d bytes over limit %d", len(got), limit)
		}
		if full, ferr := ChatKey(in); ferr == nil && limit > 0 && (err != nil || string(got) != string(full[:min(limit, len(full))])) {
			t.Fatalf("limit %d: (%q, %v), want prefix of %q", limit, got, err, full)
		}
		if err != nil || limit > 0 || !utf8.Valid(in) {
			return
		}
		var msgs []map[string]any // exact key names, as the builder matches them
		if json.Unmarshal(in, &msgs) != nil {
			return
		}
		for _, m := range msgs {
			if c, ok := m[FieldContent].(string); ok && !bytes.Contains(got, appendEscaped(nil, []byte(c))) {
				t.Fatalf("ChatKey(%q) = %q lacks content %q", in, got, c)
			}
		}
	})
}
