package daemon

import (
	"reflect"
	"testing"
)

func TestParseTokenizers(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]string
		wantErr bool
	}{
		{nil, nil, false},
		{[]string{"/tok/qwen3"}, map[string]string{"": "/tok/qwen3"}, false},
		{[]string{"Qwen/Qwen3-0.6B=/tok/qwen3", "/tok/any"}, map[string]string{"Qwen/Qwen3-0.6B": "/tok/qwen3", "": "/tok/any"}, false},
		{[]string{"m="}, nil, true},
		{[]string{"m=/a", "m=/b"}, nil, true},
	}
	for _, tt := range tests {
		got, err := ParseTokenizers(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !reflect.DeepEqual(got, tt.want)) {
			t.Errorf("ParseTokenizers(%q) = %v, %v; want %v (err %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
