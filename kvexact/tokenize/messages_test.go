package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/infergate/infergate/kvexact/bpe"
)

// decodeMessagesReference is plainMessages written with encoding/json: the
// verdict the in-place walk must reproduce.
func decodeMessagesReference(raw []byte) ([]bpe.Message, bool) {
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, false
	}
	out := make([]bpe.Message, len(list))
	for i, m := range list {
		for k := range m {
			if k != "role" && k != "content" {
				return nil, false
			}
		}
		c := bytes.TrimSpace(m["content"])
		if len(c) == 0 || c[0] != '"' {
			return nil, false
		}
		if json.Unmarshal(m["role"], &out[i].Role) != nil || json.Unmarshal(c, &out[i].Content) != nil {
			return nil, false
		}
	}
	return out, true
}

func TestPlainMessagesMatchesEncodingJSON(t *testing.T) {
	for _, raw := range []string{
		`[]`,
		` [ ] `,
		`[{"role":"user","content":"hi"}]`,
		`[{"role":"system","content":"be brief"},{"role":"user","content":"hi \"there\"\n\u00e9\ud83d\ude00"}]`,
		`[{"content":"c","role":"user"}]`,
		`[{"role":"user","content":"a","content":"b"}]`,
		`[{"r\u006fle":"user","content":"escaped key"}]`,
		`[{"role":null,"content":"null role"}]`,
		`[{"role":1,"content":"numeric role"}]`,
		`[{"content":"no role"}]`,
		`[{"role":"user"}]`,
		`[{"role":"user","content":null}]`,
		`[{"role":"user","content":[{"type":"text","text":"parts"}]}]`,
		`[{"role":"user","content":"x","name":"bob"}]`,
		`[null]`,
		`["text"]`,
		`[1]`,
		`{"role":"user","content":"not a list"}`,
		`[{"role":"user","content":"x"},]`,
		`[{"role":"user","content":"x"}] trailing`,
		`[{"role":"user","content":"bad \x escape"}]`,
		`[{"role":"user","content":"x"}`,
		``,
		"[{\"role\":\"user\",\"content\":\"invalid \xff utf8\"}]",
	} {
		var text []byte
		got, err := plainMessages(json.RawMessage(raw), &text)
		want, ok := decodeMessagesReference([]byte(raw))
		switch {
		case ok != (err == nil):
			t.Errorf("%s: err %v, encoding/json accepts: %v", raw, err, ok)
		case err != nil && !errors.Is(err, ErrUnsupported):
			t.Errorf("%s: err %v is not ErrUnsupported", raw, err)
		case ok && !reflect.DeepEqual(got, want):
			t.Errorf("%s: got %q, want %q", raw, got, want)
		}
	}
}
