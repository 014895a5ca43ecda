package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestNoBacktickInFlagUsage: pflag reads the first `quoted` word of a usage
// string as the flag's value name, so a usage quoting a command printed
// "--replica-id get replicas" in serve --help. Every flag of every command
// must keep its help text as written.
func TestNoBacktickInFlagUsage(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage %q has a backtick (pflag turns it into the value name)", c.CommandPath(), f.Name, f.Usage)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.PersistentFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(Env{Getenv: func(string) string { return "" }}))
}
