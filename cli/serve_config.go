package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/infergate/infergate/daemon"
	"github.com/infergate/infergate/optconf"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
)

// serveEnvPrefix starts every serve option's environment variable
// (max-client-conns → INFERGATE_MAX_CLIENT_CONNS).
const serveEnvPrefix = "INFERGATE_"

// Flags of serve that choose where options come from rather than being
// options themselves: they have no yaml name.
const (
	flagConfig      = "config"
	flagPrintConfig = "print-config"
)

// isSourceFlag reports whether a serve flag is one of the above.
func isSourceFlag(name string) bool { return name == flagConfig || name == flagPrintConfig }

// serveSources are the values of those flags.
type serveSources struct {
	file  string
	print bool
}

func addSourceFlags(fl *pflag.FlagSet, s *serveSources) {
	fl.StringVar(&s.file, flagConfig, "", "YAML file of serve options under the flag names (configs/serve/infergate.yaml lists every one with its default); flags, then INFERGATE_<FLAG_NAME> environment variables, override it")
	fl.BoolVar(&s.print, flagPrintConfig, false, "print the effective options (flags, environment, --config file and defaults merged; secrets redacted) as YAML and exit")
}

// loadServeOptions fills opts, already holding the parsed flags over the
// defaults, from INFERGATE_* variables and the --config file (named by the
// flag or INFERGATE_CONFIG): flag > env > file > default.
func loadServeOptions(fl *pflag.FlagSet, s serveSources, opts *daemon.Options, getenv func(string) string) error {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	src := optconf.Sources{EnvPrefix: serveEnvPrefix, Getenv: getenv}
	path := s.file
	if !fl.Changed(flagConfig) {
		if v := getenv(optconf.EnvName(serveEnvPrefix, flagConfig)); v != "" {
			path = v
		}
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		src.File, src.FileName = b, path
	}
	return optconf.Apply(fl, opts, src)
}

// derivedDefaults are options whose default is computed at start-up, with
// how: the example file leaves them without a value (which keeps the
// default) instead of pinning this machine's figure.
func derivedDefaults() map[string]string {
	return map[string]string{
		"max-client-conns": "default derived from RLIMIT_NOFILE: (limit - 1024) / 2",
		"max-conns-per-ip": "default min(1024, max-client-conns)",
	}
}

// renderServeOptions is --print-config's output; with fl, every key gets its
// flag's help as a comment and derived defaults are left empty (the
// example configs/infergate.yaml is this, from the defaults).
func renderServeOptions(opts *daemon.Options, fl *pflag.FlagSet) ([]byte, error) {
	ro := optconf.RenderOptions{}
	if fl != nil {
		ro.Flags, ro.Unset = fl, derivedDefaults()
	}
	return optconf.Render(opts, ro)
}

// newServeLogger is the daemon's logger: level and format (text or json)
// from the options.
func newServeLogger(opts daemon.Options, w io.Writer) (*logrus.Logger, error) {
	level, err := logrus.ParseLevel(opts.LogLevel)
	if err != nil {
		return nil, usagef("--log-level %q: %v", opts.LogLevel, err)
	}
	log := logrus.New()
	log.SetOutput(w)
	log.SetLevel(level)
	switch opts.LogFormat {
	case "text":
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano}) // access lines of one second stay ordered
	default:
		return nil, usagef("--log-format %q: want text or json", opts.LogFormat)
	}
	return log, nil
}
