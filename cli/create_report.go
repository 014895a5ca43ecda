package cli

import (
	"context"
	"fmt"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/rules"
)

// createRule POSTs one rule and says what it did: LoxiLB's POST is an
// upsert that replaces a rule with the same key without a word, so the CLI
// reads the rule set first and reports created, updated (with the fields)
// or unchanged. With dryRun it prints the plan and sends nothing.
func createRule(ctx context.Context, g *globals, c *client.Client, r rules.Rule, body []byte, dryRun bool) error {
	plan, err := planChange(ctx, c, r)
	if err != nil {
		return err
	}
	warnSameName(g.env.Stderr, r.ServiceArguments.Name, plan)
	if dryRun {
		writeDiff(g.env.Stdout, ruleRef(r), plan)
		return nil
	}
	res, err := c.ApplyRaw(ctx, client.KeyOf(r), body)
	if err != nil {
		return err
	}
	fmt.Fprintln(g.env.Stdout, plan.summary(res.String()))
	return nil
}
