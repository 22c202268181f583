// Package cli implements vpn-agent's subcommands. Exit codes: 0 success
// (status: healthy), 1 runtime failure (status: degraded), 2 bad input or
// usage (nothing was changed).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/wgquick"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitBadInput = 2
)

const usage = `vpn-agent confines services to a WireGuard tunnel in a network namespace.

Usage:
  vpn-agent run      --config FILE        run and supervise a namespace (systemd Type=notify)
  vpn-agent up       --config FILE        bring a namespace up and return
  vpn-agent down     NAME                 tear a namespace down completely
  vpn-agent exec     NAME -- CMD [ARG...] run a command inside a namespace
  vpn-agent status   [NAME] [--json]      show namespace health (exit 1 if degraded)
  vpn-agent validate --config FILE [--static]  check a config; change nothing
  vpn-agent policy   --config FILE [--host]    print the kill-switch ruleset (nft syntax)
  vpn-agent unit     NAME [--config F] [--agent-unit U]  print the systemd drop-in confining a service
  vpn-agent bench    [flags]              measure tunnel and kill-switch cost (see --help)
  vpn-agent demo     [-- CMD...]          confine a command behind a local WireGuard peer (no VPN account)
  vpn-agent version
`

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

type command struct {
	run  func(args []string, out io.Writer) int
	help string
}

// Main runs vpn-agent with args (without the program name).
func Main(args []string) int {
	cmds := map[string]func([]string, io.Writer) int{
		"run": cmdRun, "up": cmdUp, "down": cmdDown, "exec": cmdExec,
		"status": cmdStatus, "validate": cmdValidate, "policy": cmdPolicy,
		"unit": cmdUnit, "bench": cmdBench, "demo": cmdDemo,
		"version": func([]string, io.Writer) int { fmt.Println("vpn-agent", Version); return 0 },
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, usage)
		if len(args) == 0 {
			return ExitBadInput
		}
		return ExitOK
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "vpn-agent: unknown command %q; run vpn-agent --help\n", args[0])
		return ExitBadInput
	}
	return c(args[1:], os.Stdout)
}

// flags makes a FlagSet with the shared logging flags.
func flags(name string) (*flag.FlagSet, *string, *string) {
	fs := flag.NewFlagSet("vpn-agent "+name, flag.ContinueOnError)
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	format := fs.String("log-format", "text", "log format: text or json")
	return fs, level, format
}

// parse parses flags anywhere on the line (`status NAME --json` as well as
// `status --json NAME`); everything after "--" is positional. It returns an
// exit code to stop with, or -1 to go on.
func parse(fs *flag.FlagSet, args []string) int {
	fs.SetOutput(os.Stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return ExitOK
			}
			return ExitBadInput
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...) // after "--": all positional
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	fs.Parse(append([]string{"--"}, pos...))
	return -1
}

func newLogger(level, format string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// fail prints err as one line and returns the matching exit code.
func fail(err error) int {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	fmt.Fprintf(os.Stderr, "vpn-agent: %s\n", msg)
	if isBadInput(err) {
		return ExitBadInput
	}
	return ExitFailure
}

func isBadInput(err error) bool {
	var fe *config.FieldError
	var we *wgquick.Error
	return errors.As(err, &fe) || errors.As(err, &we)
}

// loadSpec loads the config named by --config.
func loadSpec(path string, static bool) (*config.Spec, error) {
	if path == "" {
		return nil, &config.FieldError{Field: "--config", Msg: "missing", Fix: "pass --config /etc/vpn-confinement/NAME.json"}
	}
	return config.LoadSpec(path, config.Options{Static: static})
}

// nameArg returns the single NAME positional argument.
func nameArg(fs *flag.FlagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", &config.FieldError{Field: "NAME", Msg: "expected exactly one namespace name", Fix: "e.g. vpn-agent " + strings.TrimPrefix(fs.Name(), "vpn-agent ") + " proton"}
	}
	name := fs.Arg(0)
	return name, config.ValidateName(name)
}
