package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/daemon"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
)

// Exit codes of the binary.
const (
	ExitOK       = 0
	ExitFailed   = 1 // rejected by the server, transport failure, bad file
	ExitUsage    = 2 // bad flags or arguments
	envServer    = "INFERGATE_SERVER"
	envToken     = "INFERGATE_TOKEN"
	envTokenFile = "INFERGATE_TOKEN_FILE"
	defaultAddr  = "http://127.0.0.1:11111"
	defaultLimit = 10 * time.Second
)

// ServeFunc runs the gateway until ctx is cancelled (daemon.Run).
type ServeFunc func(ctx context.Context, opts daemon.Options, log *logrus.Logger) error

// Env is everything the CLI takes from its process.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// Serve runs the daemon; nil makes `serve` fail with a clear message.
	Serve ServeFunc
}

// usageError is a problem with the command line itself (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// failure is a command that ran and failed (exit 1).
type failure struct{ err error }

func (e failure) Error() string { return e.err.Error() }
func (e failure) Unwrap() error { return e.err }

// globals are the persistent flags shared by every command.
type globals struct {
	server    string
	timeout   time.Duration
	output    string
	token     string // --token (visible in ps; prefer --token-file)
	tokenFile string // --token-file
	env       Env
	loxi      *loxiGlobals // loxicmd's -s/-p/--protocol (loxicmd.go)

	// HTTPS to the management API: --cacert, --cert, --key
	// (and loxicmd's --protocol); resolved into server and httpClient
	// before a command runs.
	tls        client.TLSOptions
	httpClient *http.Client
}

// client builds the API client for the resolved server, with the TLS
// trust and the bearer token when they are given.
func (g *globals) client() (*client.Client, error) {
	hc := g.httpClient
	if hc == nil {
		hc = &http.Client{Timeout: g.timeout}
	}
	c := client.New(g.server, hc)
	tok, err := g.apiToken()
	if err != nil {
		return nil, err
	}
	return c.WithToken(tok), nil
}

// resolveServer applies loxicmd's -s/-p (a whole base URL) or --protocol
// alone (the --server scheme), and builds the HTTP client with the TLS
// files; usage errors name the flag.
func (g *globals) resolveServer() error {
	g.server = withDefaultScheme(g.server, g.tls)
	switch {
	case g.loxi.fs.Changed("apiserver") || g.loxi.fs.Changed("port"):
		u, err := g.loxi.baseURL()
		if err != nil {
			return err
		}
		g.server = u
	case g.loxi.fs.Changed("protocol"):
		u, err := client.WithProtocol(g.server, g.loxi.protocol)
		if err != nil {
			return usagef("%v", err)
		}
		g.server = u
	}
	hc, err := client.NewHTTPClient(g.timeout, g.tls)
	if err != nil {
		return usagef("%v", err)
	}
	g.httpClient = hc
	return nil
}

// Main runs the CLI with args (without the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	root := newRoot(env)
	root.SetArgs(args)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	path := root.Name()
	if cmd != nil {
		path = cmd.CommandPath()
	}
	return report(env.Stderr, path, err)
}

// report prints err and maps it to an exit code. Errors from RunE are
// typed (usageError, failure); anything else came from cobra's own parsing
// (unknown flag or command, wrong argument count) and is a usage error.
func report(w io.Writer, cmdPath string, err error) int {
	if err == nil {
		return ExitOK
	}
	var f failure
	if errors.As(err, &f) {
		printError(w, f.err)
		return ExitFailed
	}
	fmt.Fprintf(w, "Error: %v\nRun '%s --help' for usage.\n", err, cmdPath)
	return ExitUsage
}

// printError prints a failure; a server rejection gets every field of the
// error envelope so people and scripts see the same facts.
func printError(w io.Writer, err error) {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		fmt.Fprintf(w, "Error: %v\n", err)
		return
	}
	fmt.Fprintf(w, "Error: %v\n", err)
	defer printAuthHint(w, ae)
	fmt.Fprintf(w, "  status:     %d\n", ae.Status)
	if ae.Message != "" {
		fmt.Fprintf(w, "  message:    %s\n", ae.Message)
	}
	if ae.Result != "" {
		fmt.Fprintf(w, "  result:     %s\n", ae.Result)
	}
	if ae.ErrorCode != "" {
		fmt.Fprintf(w, "  error_code: %s\n", ae.ErrorCode)
	}
	if ae.Field != "" {
		fmt.Fprintf(w, "  field:      %s\n", ae.Field)
	}
}

// run adapts a command body: usage errors pass through, everything else is
// a failure (exit 1).
func run(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		if err == nil {
			return nil
		}
		var u usageError
		var f failure
		if errors.As(err, &u) || errors.As(err, &f) {
			return err
		}
		return failure{err: err}
	}
}

func newRoot(env Env) *cobra.Command {
	g := &globals{env: env}
	root := &cobra.Command{
		Use:           "infergate",
		Short:         "Inference gateway: LoxiLB-compatible rules for LLM serving fleets",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	server := env.Getenv(envServer)
	if server == "" {
		server = defaultAddr
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", server, "management API base URL; host:port alone means http:// (https:// with --cacert/--cert) (env "+envServer+")")
	pf.DurationVar(&g.timeout, "timeout", defaultLimit, "timeout of each API request")
	pf.StringVarP(&g.output, "output", "o", "", "output format: table (default), wide, json or yaml")
	pf.StringVar(&g.token, "token", "", "management API bearer token (visible to other local users in ps: prefer --token-file or env "+envToken+")")
	pf.StringVar(&g.tokenFile, "token-file", "", "file holding the management API bearer token (env "+envTokenFile+")")
	g.loxi = addLoxiGlobals(pf)
	pf.StringVar(&g.tls.CACert, "cacert", "", "CA bundle (PEM) that signs the management API certificate")
	pf.StringVar(&g.tls.Cert, "cert", "", "client certificate (PEM) for a management API that requires mTLS")
	pf.StringVar(&g.tls.Key, "key", "", "private key (PEM) of --cert")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return g.resolveServer() }

	root.AddCommand(newServeCmd(g), newCreateCmd(g), newGetCmd(g), newDeleteCmd(g), newApplyCmd(g),
		newValidateCmd(g), newDemoCmd(g), newFakeEngineCmd(g), newExplainCmd(g))
	root.AddCommand(newSaveCmd(g)) // LoxiLB's save --lb
	root.AddCommand(newDiffCmd(g), newVersionCmd(g))
	update := groupCmd("update", "Change a tenant API key")
	update.AddCommand(newUpdateAPIKeyCmd(g))
	root.AddCommand(update, newAPIKeyCmd(g))
	root.AddCommand(newMigrateCmd(g), newRegisterCmd(g)) // shared rule store (etcd replicas)
	return root
}
