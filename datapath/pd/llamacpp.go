package pd

// llama.cpp has no P/D protocol (no Dialect); the gateway still needs its
// operator APIs so single pools keep them from clients.

// llamacppAdminPaths are llama-server's slot save/restore/erase (and the
// slot list, which shows other clients' prompts), LoRA scaling and model
// load/unload of its router mode (read-only).
var llamacppAdminPaths = []string{"/slots", "/slots/*", "/lora-adapters", "/models/load", "/models/unload"}
