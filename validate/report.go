package validate

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// writeStep prints one finished step with its evidence and hints.
func writeStep(w io.Writer, s StepResult) {
	fmt.Fprintf(w, "  %s  %s: %s (%s)\n", s.Status, s.Name, s.Summary, s.Duration.Round(time.Millisecond))
	for _, e := range s.Evidence {
		fmt.Fprintf(w, "        - %s\n", e)
	}
	for _, h := range s.Hints {
		fmt.Fprintf(w, "        hint: %s\n", h)
	}
}

// WriteTable prints the summary table and the verdict.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "STEP\tRESULT\tSUMMARY\n")
	for _, s := range r.Steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Status, s.Summary)
	}
	_ = tw.Flush()
	verdict := "PASSED"
	switch {
	case r.Interrupted:
		verdict = "INTERRUPTED"
	case !r.Passed:
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "validate %s (rule %q): %s\n", r.Target, r.Rule, verdict)
}
