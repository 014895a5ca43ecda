package cli_test

import (
	"context"
	"testing"

	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/daemon"
	"github.com/sirupsen/logrus"
)

// TestPDOriginErrThreshold: LoxiLB's LLB_PD_ORIGIN_ERR_THRESHOLD sets the
// P/D 5xx streak (0 disables it) unless --breaker-pd-5xx-streak is given;
// the default is LoxiLB's 3; a malformed value is a usage error.
func TestPDOriginErrThreshold(t *testing.T) {
	tests := []struct {
		name string
		env  string // "" = unset
		args []string
		want int
		code int
	}{
		{"default", "", nil, 3, cli.ExitOK},
		{"env", "7", nil, 7, cli.ExitOK},
		{"env 0 disables", "0", nil, 0, cli.ExitOK},
		{"flag wins over env", "7", []string{"--breaker-pd-5xx-streak=2"}, 2, cli.ExitOK},
		{"flag 0", "", []string{"--breaker-pd-5xx-streak=0"}, 0, cli.ExitOK},
		{"env not a number", "three", nil, 0, cli.ExitUsage},
		{"env negative", "-1", nil, 0, cli.ExitUsage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := -1
			serve := func(_ context.Context, o daemon.Options, _ *logrus.Logger) error {
				got = o.BreakerPD5xxStreak
				return nil
			}
			env := cli.Env{Serve: serve, Getenv: func(k string) string {
				if k == "LLB_PD_ORIGIN_ERR_THRESHOLD" {
					return tc.env
				}
				return ""
			}}
			res := runEnv(t, env, append([]string{"serve"}, tc.args...)...)
			if res.code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %q)", res.code, tc.code, res.stderr)
			}
			if tc.code == cli.ExitOK && got != tc.want {
				t.Fatalf("BreakerPD5xxStreak = %d, want %d", got, tc.want)
			}
		})
	}
}
