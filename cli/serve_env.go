package cli

import (
	"strconv"
	"strings"

	"github.com/infergate/infergate/daemon"
	"github.com/spf13/cobra"
)

// envPDOriginErrThreshold is LoxiLB's switch for the P/D origin-error
// breaker: the streak of engine 5xx that opens a P/D endpoint's breaker,
// 0 disabling it. Read here, in the option layer, so the datapath never
// looks at the environment.
const envPDOriginErrThreshold = "LLB_PD_ORIGIN_ERR_THRESHOLD"

// flagBreakerPD5xxStreak is the flag the environment variable stands in for.
const flagBreakerPD5xxStreak = "breaker-pd-5xx-streak"

// applyServeEnv fills options from LoxiLB's environment variables where
// the matching flag was not given (an explicit flag wins). A value that is
// not a non-negative integer is a usage error: a typo must not silently
// leave the breaker at its default.
func applyServeEnv(cmd *cobra.Command, opts *daemon.Options, getenv func(string) string) error {
	if getenv == nil || cmd.Flags().Changed(flagBreakerPD5xxStreak) {
		return nil
	}
	v := strings.TrimSpace(getenv(envPDOriginErrThreshold))
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return usagef("%s=%q: want a non-negative integer (0 disables the P/D origin-error breaker)", envPDOriginErrThreshold, v)
	}
	opts.BreakerPD5xxStreak = n
	return nil
}
