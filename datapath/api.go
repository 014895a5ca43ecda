package datapath

// OpenAI-compatible paths the datapath knows by name. Single-pool rules
// forward every path (surface.go); these matter to P/D rules and routing.
const (
	pathCompletions     = "/v1/completions"
	pathChatCompletions = "/v1/chat/completions"
	pathModels          = "/v1/models"
)
