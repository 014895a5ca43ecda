package tenant

import "testing"

func TestLastUsage(t *testing.T) {
	tests := []struct {
		name   string
		tail   string
		p, c   int
		wantOK bool
	}{
		{"body", `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":230,"completion_tokens":16,"total_tokens":246}}`, 230, 16, true},
		{"stream event", "data: {\"choices\":[],\"usage\": { \"prompt_tokens\" : 12 , \"completion_tokens\":34}}\n\ndata: [DONE]\n\n", 12, 34, true},
		{"last usage wins", `{"usage":{"prompt_tokens":1,"completion_tokens":1}} {"usage":{"prompt_tokens":2,"completion_tokens":3}}`, 2, 3, true},
		{"details before the counts", `{"usage":{"prompt_tokens_details":{"cached_tokens":4},"prompt_tokens":9,"completion_tokens":1}}`, 9, 1, true},
		{"escaped names as the engine reads them", `{"usage":{"prompt\u005ftokens":7,"completion_tokens":2}}`, 7, 2, true},
		{"no completion count", `{"usage":{"prompt_tokens":5}}`, 5, 0, true},
		{"usage without counts falls back to an earlier one", `{"usage":{"prompt_tokens":8}} {"usage":{}}`, 8, 0, true},
		{"tail cut inside the object keeps what was read", `{"usage":{"prompt_tokens":6,"completion_tok`, 6, 0, true},
		{"the name inside a string is not an object", `{"text":"\"usage\" is","x":1}`, 0, 0, false},
		{"null usage", `{"usage":null}`, 0, 0, false},
		{"nothing", ``, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c, ok := lastUsage([]byte(tt.tail))
			if p != tt.p || c != tt.c || ok != tt.wantOK {
				t.Fatalf("lastUsage = %d, %d, %v; want %d, %d, %v", p, c, ok, tt.p, tt.c, tt.wantOK)
			}
		})
	}
}
