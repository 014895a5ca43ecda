// Package cli implements the `infergate` command line: `serve` runs the
// gateway, and `create|get|delete lb`, `apply -f` and `delete -f` drive a
// running gateway through its LoxiLB-compatible REST API (package
// api/client). Flag names follow loxicmd's so existing scripts keep working.
//
// Contract: Main never calls os.Exit and reads no environment itself; the
// binary passes stdout, stderr, getenv and the daemon entry point in Env.
// Exit codes: 0 success, 1 a request was rejected or failed (the server's
// message, result, error_code and field go to stderr), 2 usage error. The
// CLI checks only what the server cannot know (flag alignment, role and
// mode names); every rule-level rule is the server's, so the CLI, YAML
// files and raw REST clients are rejected identically.
package cli
