package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/infergate/infergate/api/client"
	"github.com/spf13/cobra"
)

// replicasFromServer is `get replicas` without --store: the gateway at
// --server reads its shared store (GET …/replicas), so the operator needs
// the management API only, not etcd's address and credentials.
func replicasFromServer(cmd *cobra.Command, g *globals) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	ctx, cancel := contextWithTimeout(cmd, g.timeout)
	defer cancel()
	list, err := c.Replicas(ctx)
	if err != nil {
		return err
	}
	return writeReplicas(g.env.Stdout, list.Replicas, list.Revision, "the store of "+g.server)
}

// writeReplicas prints the replica table and fails (exit 1) when no replica
// is live or their digests differ: replicas that agree serve exactly the
// same rules. where names the store in the messages.
func writeReplicas(out io.Writer, reps []client.Replica, rev int64, where string) error {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tAPI\tREVISION\tLAG\tRULES\tDIGEST\tUPDATED")
	digests := map[string]bool{}
	for _, r := range reps {
		digests[r.Digest] = true
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.ID, r.API, r.Revision, max(0, rev-r.Revision), r.Rules, r.Digest, r.Updated.Format(time.RFC3339))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	switch {
	case len(reps) == 0:
		return fmt.Errorf("no replica is registered under %s", where)
	case len(digests) > 1:
		return fmt.Errorf("replicas disagree: %d different rule sets (%s)", len(digests), strings.Join(keys(digests), ", "))
	}
	fmt.Fprintf(out, "%d replicas serve the same rules (store revision %d)\n", len(reps), rev)
	return nil
}
