package pd

import "testing"

func TestBodyPool(t *testing.T) {
	var nilPool *bodyPool
	if b := nilPool.get(10); len(b) != 0 || cap(b) < 10 {
		t.Errorf("nil pool get(10): len %d cap %d", len(b), cap(b))
	}
	nilPool.put(make([]byte, 10)) // must not panic

	tests := []struct {
		name    string
		put     int // capacity put back (0: nothing)
		get     int
		fromPut bool // the buffer put back may be the one returned
	}{
		{"empty pool allocates", 0, 100, false},
		{"large enough is reused", 1 << 10, 100, true},
		{"too small is never returned", 64, 100, false},
		{"oversized is not kept", maxPooledBody + 1, 100, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p bodyPool
			var put []byte
			if tc.put > 0 {
				put = make([]byte, 7, tc.put)
				p.put(put)
			}
			got := p.get(tc.get)
			if len(got) != 0 || cap(got) < tc.get {
				t.Fatalf("get(%d): len %d cap %d", tc.get, len(got), cap(got))
			}
			// sync.Pool may drop what it is given, so reuse is allowed,
			// never required; a buffer it must not hand out is an error.
			if same := put != nil && &got[:1][0] == &put[:1][0]; same && !tc.fromPut {
				t.Errorf("get(%d) returned the buffer of capacity %d that was put back", tc.get, tc.put)
			}
		})
	}
}
