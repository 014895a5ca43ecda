// Command infergate is the inference gateway: `infergate serve` runs it and
// the other commands manage rules through its REST API. All logic lives in
// package cli; this file only binds the process to it.
package main

import (
	"context"
	"os"

	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/daemon"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Env{
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Getenv: os.Getenv,
		Serve:  daemon.Run,
	}))
}
