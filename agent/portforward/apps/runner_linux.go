package apps

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// waitDelay bounds the wait for the command's output once it has exited
// or been killed: a process that left the group cannot hold the caller
// by keeping the output pipe open.
const waitDelay = 2 * time.Second

// NamespaceRunner runs argv inside namespace ns the way `vpn-agent exec
// NS -- argv` does (the network namespace, and the namespace's
// resolv.conf and nsswitch.conf bound over the host's in a private mount
// namespace), by starting agentExe (the agent's own executable, e.g.
// os.Executable()) with its exec subcommand, in its own process group
// with stdin /dev/null and the working directory /; when ctx is done the
// whole group is killed. Its output is returned, or kept in the
// *CommandError.
//
// With user "" it runs as the agent does: root, with every capability.
// With a user (a name or uid) it runs as `vpn-agent exec --user USER`
// does: without capabilities, under exec's seccomp filter, in its own
// session and PID namespace (killing the exec process kills them all),
// with exec's clean environment and each variable of env passed on with
// --env.
func NamespaceRunner(agentExe, ns, user string) RunFunc {
	return func(ctx context.Context, argv, env []string) ([]byte, error) {
		args := []string{"exec"}
		if user != "" {
			args = append(args, "--user", user)
			for _, e := range env {
				name, _, _ := strings.Cut(e, "=")
				args = append(args, "--env", name)
			}
		}
		args = append(append(args, ns, "--"), argv...)
		return runGroup(ctx, agentExe, args, env)
	}
}

// runGroup runs path with args in a process group of its own, killed
// whole when ctx is done, and returns its output (at most MaxOutput bytes).
func runGroup(ctx context.Context, path string, args, env []string) ([]byte, error) {
	out := &boundedBuffer{max: MaxOutput}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	if err == nil || errors.Is(err, exec.ErrWaitDelay) {
		// ErrWaitDelay: it exited 0, and something it started still
		// holds its output; the run is done.
		return out.buf, nil
	}
	ce := &CommandError{Code: -1, Output: out.buf, Truncated: out.dropped, Err: err}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ce.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ce.Signal = ws.Signal().String()
		}
	}
	if ctx.Err() != nil {
		ce.TimedOut = true
	}
	return nil, ce
}
