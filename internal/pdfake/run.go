package pdfake

import (
	"context"
	"fmt"
	"io"
)

// Run starts one fake engine, prints its addresses to out and serves until
// ctx ends. It is the pdfake binary's body.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	e, err := Start(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pdfake dialect=%s role=%s addr=%s nixl_port=%d bootstrap_port=%d\n",
		cfg.Dialect, cfg.Role, e.AddrPort(), e.NixlPort(), e.BootstrapPort())
	<-ctx.Done()
	if err := e.Close(); err != nil {
		return fmt.Errorf("pdfake: close: %w", err)
	}
	return nil
}
