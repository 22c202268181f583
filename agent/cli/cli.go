// Package cli implements vpn-agent's subcommands. Exit codes (docs/exit-codes.md's
// table): 0 success (status: healthy), 1 runtime failure (status:
// degraded), 2 bad input or usage, including what only the host reveals
// at up (preflight), a namespace that is not up, and up, run, down, exec
// or status without root (needRoot): nothing was changed.
package cli

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/flagparse"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wgquick"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitBadInput = 2
)

// A command is one subcommand: its synopsis (the arguments after its
// name) and summary make the usage and its --help.
type command struct {
	name, args, summary string
	run                 func(args []string, out io.Writer) int
}

// commands are listed in usage order; a function, since their run
// functions look commands up for --help.
func commands() []command {
	return []command{
		{"run", "--config FILE [--adopt]", "run and supervise a namespace (systemd Type=notify; SIGHUP reloads)", cmdRun},
		{"up", "--config FILE [--timeout D] [--wait-handshake] [--adopt]", "bring a namespace up and return (reload it if up with a changed config; --wait-handshake: once the tunnel works)", cmdUp},
		{"down", "NAME [--timeout D] [--force]", "tear a namespace down completely", cmdDown},
		{"exec", "[--user USER[:GROUP] [--env NAME[=VALUE]]...] NAME -- CMD [ARG...]", "run a command inside a namespace (as USER: confined, in its own session and PID namespace)", cmdExec},
		{"status", "[NAME...] [--json]", "show namespace health (exit 1 if degraded, 2 if not up; needs root)", cmdStatus},
		{"validate", "--config FILE [--config FILE...] [--static]", "check configs (and conflicts between them); change nothing", cmdValidate},
		{"policy", "--config FILE [--host]", "print the kill-switch ruleset (nft syntax)", cmdPolicy},
		{"unit", "NAME [--config FILE] [--agent-unit UNIT] [--socket | --container | --restart-with-agent UNITS]", "print the systemd drop-in confining a service (or a socket unit, or a container's unit)", cmdUnit},
		{"podman-flags", "NAME [--config FILE] [--why]", "print the podman run flags confining a container, one a line", cmdPodmanFlags},
		{"demo", "[-- CMD [ARG...]]", "confine a command behind a local WireGuard peer (no VPN account)", cmdDemo},
		{"version", "", "print the version", cmdVersion},
	}
}

func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return &c
		}
	}
	return nil
}

func usage() string {
	var b strings.Builder
	b.WriteString("vpn-agent confines services to a WireGuard tunnel in a network namespace.\n\nUsage:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  vpn-agent %-8s %s\n      %s\n", c.name, c.args, c.summary)
	}
	b.WriteString("\nvpn-agent COMMAND --help shows a command's flags. Exit codes: 0 ok (status:\n" +
		"healthy), 1 degraded or a runtime failure, 2 bad input, also found only at up\n" +
		"(unresolvable endpoint, interface name or listen port taken, no kernel module),\n" +
		"a namespace that is not up, or up, run, down, exec or status without root:\n" +
		"nothing was changed. exec passes the command's exit status through.\n")
	return b.String()
}

// Version is set at build time with -ldflags "-X ...cli.Version=..."; a
// `go install module@version` build, or one of a clean checkout of a
// release tag, takes the module's version, and any other build of a
// checkout the commit Go embeds: dev-<12 hex>, with -dirty when the tree
// had changes.
var Version = "dev"

func version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(Version, bi) + buildNote
}

// versionOf is the version given at build time (v), else the one bi
// (nil: none) records.
func versionOf(v string, bi *debug.BuildInfo) string {
	if v != "dev" || bi == nil {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	mv := bi.Main.Version
	if mv == "(devel)" {
		mv = ""
	}
	// Go (1.24+) derives the module's version from the checkout too: a
	// pseudo-version naming the commit, or a tag with +dirty. Only a
	// clean tag is a release.
	if rev != "" && (mv == "" || strings.Contains(mv, rev) || strings.HasSuffix(mv, "+dirty")) {
		return v + "-" + rev + dirty
	}
	return cmp.Or(mv, v)
}

func cmdVersion(args []string, out io.Writer) int {
	fs, _, _ := flags("version")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	fmt.Fprintln(out, "vpn-agent", version())
	return ExitOK
}

// Main runs vpn-agent with args (without the program name).
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage())
		return ExitBadInput
	}
	switch args[0] {
	case "-h", "--help":
		fmt.Fprint(os.Stdout, usage())
		return ExitOK
	case "help":
		if len(args) > 1 && lookup(args[1]) != nil {
			return lookup(args[1]).run([]string{"--help"}, os.Stdout)
		}
		fmt.Fprint(os.Stdout, usage())
		return ExitOK
	case "--version":
		return cmdVersion(nil, os.Stdout)
	case netns.InitCommand: // exec --user's own, not in the usage
		return netns.ExecInit(args[1:])
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(os.Stderr, "vpn-agent: unknown command %q; run vpn-agent --help\n", args[0])
		return ExitBadInput
	}
	return c.run(args[1:], os.Stdout)
}

// flags makes a FlagSet with the shared logging flags.
func flags(name string) (*flag.FlagSet, *string, *string) {
	fs := flag.NewFlagSet("vpn-agent "+name, flag.ContinueOnError)
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	format := fs.String("log-format", "text", "log format: text or json")
	return fs, level, format
}

// parse parses flags anywhere on the line (flagparse.Interleaved). Help
// goes to stdout; a bad flag is one line on stderr. It returns an exit code
// to stop with, or -1 to go on.
func parse(fs *flag.FlagSet, args []string) int {
	err := flagparse.Interleaved(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printHelp(os.Stdout, fs)
		return ExitOK
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: %v (see %s --help)\n", fs.Name(), err, fs.Name())
		return ExitBadInput
	}
	return -1
}

// printHelp prints a command's synopsis, summary and flags.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	name := strings.TrimPrefix(fs.Name(), "vpn-agent ")
	if c := lookup(name); c != nil {
		fmt.Fprintf(w, "Usage: vpn-agent %s %s\n\n%s.\n", c.name, c.args, strings.ToUpper(c.summary[:1])+c.summary[1:])
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
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

// needRoot is the root check of a command that reads or changes
// namespaces: run without root it prints one line saying why the command
// needs root and returns ExitBadInput, before anything is touched; as
// root it returns -1 (go on).
func needRoot(cmd, why string) int {
	if os.Geteuid() == 0 {
		return -1
	}
	fmt.Fprintf(os.Stderr, "vpn-agent: %s needs root: %s (run it with sudo)\n", cmd, why)
	return ExitBadInput
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
	var no *engine.NotOwnedError
	var nu *engine.NotUpError
	var rn *engine.RestartNeeded
	var cb *childBadInput
	return errors.As(err, &fe) || errors.As(err, &we) || errors.As(err, &no) || errors.As(err, &nu) || errors.As(err, &rn) || errors.As(err, &cb)
}

// loadSpec loads the config named by --config.
func loadSpec(path string, static bool) (*config.Spec, error) {
	if path == "" {
		return nil, &config.FieldError{Field: "--config", Msg: "missing", Fix: "pass --config /etc/vpn-confinement/NAME.json"}
	}
	return config.LoadSpec(path, config.Options{Static: static, HostPrefixes: netns.Prefixes})
}

// nameArg returns the single NAME positional argument.
func nameArg(fs *flag.FlagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", &config.FieldError{Field: "NAME", Msg: "expected exactly one namespace name", Fix: "e.g. vpn-agent " + strings.TrimPrefix(fs.Name(), "vpn-agent ") + " proton"}
	}
	name := fs.Arg(0)
	return name, config.ValidateName(name)
}
