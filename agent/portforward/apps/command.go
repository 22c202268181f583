package apps

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RunFunc runs argv with exactly the environment env and returns when it
// has finished or ctx is done (then it is killed). A run that worked
// returns the command's output (stdout and stderr together, at most
// MaxOutput bytes); a failure is best a *CommandError, which carries it.
type RunFunc func(ctx context.Context, argv, env []string) ([]byte, error)

// CommandTimeout bounds one run of the onChange command.
const CommandTimeout = 30 * time.Second

// commandPath is the command's PATH, the only variable it gets besides
// the forwarded port's.
const commandPath = "/run/wrappers/bin:/run/current-system/sw/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Environment variables the command is given.
const (
	EnvPort      = "VPN_FORWARDED_PORT"      // the port, "" when it was lost
	EnvProtocols = "VPN_FORWARDED_PROTOCOLS" // e.g. "tcp,udp"
)

type command struct {
	argv []string
	run  RunFunc
}

// NewCommand runs argv on every push (in production through
// NamespaceRunner), with a minimal environment: PATH, EnvPort and
// EnvProtocols. A port lost is a run with EnvPort empty. Each run is
// bounded by CommandTimeout; a non-zero exit is an error naming its code.
// Its PushReport (portforward.Reporter) says how a run that worked ended,
// for the log: exit code 0 and the start of the output, as an error does
// (the log line already names the command and the port).
func NewCommand(argv []string, run RunFunc) Pusher {
	return &command{argv: append([]string(nil), argv...), run: run}
}

func (c *command) Name() string   { return "onChange" }
func (c *command) String() string { return "onChange " + c.program() }

func (c *command) program() string {
	if len(c.argv) == 0 {
		return "(no command)"
	}
	return c.argv[0]
}

func (c *command) Push(ctx context.Context, port uint16, protocols []string) error {
	_, err := c.PushReport(ctx, port, protocols)
	return err
}

func (c *command) PushReport(ctx context.Context, port uint16, protocols []string) (string, error) {
	if len(c.argv) == 0 {
		return "", fmt.Errorf("onChange: no command given")
	}
	p := ""
	if port != 0 {
		p = strconv.Itoa(int(port))
	}
	env := []string{
		"PATH=" + commandPath,
		EnvPort + "=" + p,
		EnvProtocols + "=" + strings.Join(protocols, ","),
	}
	ctx, cancel := context.WithTimeout(ctx, CommandTimeout)
	defer cancel()
	what := fmt.Sprintf("onChange %s (%s=%s)", c.program(), EnvPort, p)
	out, err := c.run(ctx, c.argv, env)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return withOutput("exit code 0", out), nil // the log line names the pusher and the port
}

// MaxOutput bounds the output a CommandError keeps.
const MaxOutput = 4 << 10

// CommandError is a command that failed: its exit code (-1 when it did
// not exit by itself), whether it ran out of time, and the start of its
// output (stdout and stderr together, at most MaxOutput bytes) for the
// caller to log.
type CommandError struct {
	Code      int
	Signal    string // the signal that ended it, if one did
	TimedOut  bool
	Output    []byte
	Truncated bool // Output is only the first MaxOutput bytes
	Err       error
}

func (e *CommandError) Error() string {
	var s string
	switch {
	case e.TimedOut:
		s = "did not finish in time: killed with its process group"
	case e.Signal != "":
		s = "killed by signal " + e.Signal
	case e.Code > 0:
		s = "exit code " + strconv.Itoa(e.Code)
	case e.Err != nil:
		s = e.Err.Error()
	default:
		s = "failed"
	}
	return withOutput(s, e.Output)
}

// withOutput is how a run ended, then the start of its output on one
// line (see excerpt), if it wrote any.
func withOutput(ended string, out []byte) string {
	if e := excerpt(out); e != "" {
		return ended + ": output: " + e
	}
	return ended
}

func (e *CommandError) Unwrap() error { return e.Err }

// boundedBuffer keeps the first max bytes written to it and drops the
// rest, never failing a write (a command must not die of SIGPIPE because
// it talks much).
type boundedBuffer struct {
	buf     []byte
	max     int
	dropped bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room < len(p) {
		b.buf = append(b.buf, p[:max(room, 0)]...)
		b.dropped = true
	} else {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}
