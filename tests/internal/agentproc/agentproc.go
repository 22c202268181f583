// Package agentproc drives the vpn-agent binary from tests: one-shot
// subcommands and the long-running `run`, inside the simulated host's
// network namespace. Processes are started with only their network
// namespace switched (see nsutil), so namespaces the agent creates under
// /run/netns are visible to the tests.
package agentproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// Agent is a vpn-agent binary run in a host namespace.
type Agent struct {
	Bin    string // path to vpn-agent
	HostNS string // the namespace it runs in (the simulated host)
	// Env is added to the test process's environment for every command
	// and daemon (e.g. the fault-injection hooks, VPN_AGENT_TEST_HOOKS=1).
	Env []string
}

// environ is the environment for the agent's processes, nil meaning the
// test process's own.
func (a Agent) environ(extra ...string) []string {
	if len(a.Env) == 0 && len(extra) == 0 {
		return nil
	}
	return append(append(os.Environ(), a.Env...), extra...)
}

// ReadyTimeout bounds `run` until READY=1; CmdTimeout one-shot commands.
var (
	ReadyTimeout = 20 * time.Second
	CmdTimeout   = 20 * time.Second
)

// Output is a finished one-shot command.
type Output struct {
	Args           []string
	Stdout, Stderr string
	Err            error // nil on exit 0
}

// ExitCode is the command's exit status: 0 on success, -1 if it did not
// exit normally (killed by a signal, not started).
func (o Output) ExitCode() int {
	if o.Err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(o.Err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func (o Output) String() string {
	return fmt.Sprintf("vpn-agent %s: err=%v\nstdout:\n%s\nstderr:\n%s", strings.Join(o.Args, " "), o.Err, o.Stdout, o.Stderr)
}

// Cmd runs `vpn-agent args...` to completion.
func (a Agent) Cmd(args ...string) Output {
	ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, a.Bin, args...)
	cmd.Env = a.environ()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	o := Output{Args: args}
	if err := testbed.Start(a.HostNS, cmd); err != nil {
		o.Err = err
		return o
	}
	o.Err = cmd.Wait()
	if ctx.Err() != nil {
		o.Err = fmt.Errorf("killed after %v: %w", CmdTimeout, o.Err)
	}
	o.Stdout, o.Stderr = stdout.String(), stderr.String()
	return o
}

// MustCmd runs Cmd and fails t unless it exits 0.
func (a Agent) MustCmd(t testing.TB, args ...string) Output {
	t.Helper()
	o := a.Cmd(args...)
	if o.Err != nil {
		t.Fatal(o.String())
	}
	return o
}

// Status runs `status name --json` and decodes the JSON object it prints.
func (a Agent) Status(name string) (map[string]any, Output, error) {
	o := a.Cmd("status", name, "--json")
	if o.Err != nil {
		return nil, o, o.Err
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(o.Stdout), &m); err != nil {
		return nil, o, fmt.Errorf("status --json output is not a JSON object: %w", err)
	}
	return m, o, nil
}

// StatusJSON runs `status name --json` and returns its exit code (1 while
// the namespace is degraded) and the JSON object it prints either way; it
// fails t unless it prints one.
func (a Agent) StatusJSON(t testing.TB, name string) (int, map[string]any) {
	t.Helper()
	o := a.Cmd("status", name, "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(o.Stdout), &m); err != nil {
		t.Fatalf("status --json: %v\n%s", err, o)
	}
	return o.ExitCode(), m
}

// Daemon is a running `vpn-agent run`.
type Daemon struct {
	Args []string
	cmd  *exec.Cmd
	done chan struct{}

	mu      sync.Mutex
	output  bytes.Buffer // stdout and stderr
	notify  []string     // sd_notify messages received
	stopped bool
}

// Run starts `vpn-agent run --config cfg [extra...]` with NOTIFY_SOCKET
// set, waits for READY=1, and stops it (SIGTERM) at cleanup. It fails t if
// the agent exits or is not ready within ReadyTimeout.
func (a Agent) Run(t testing.TB, cfg string, extra ...string) *Daemon {
	t.Helper()
	d, err := a.Start(cfg, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("vpn-agent run: %v", err)
		}
	})
	return d
}

// Start is Run without a testing.TB: the caller must Stop the daemon.
func (a Agent) Start(cfg string, extra ...string) (*Daemon, error) {
	// A short directory: sun_path holds 107 bytes.
	dir, err := os.MkdirTemp("", "vtn")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	d := &Daemon{Args: append([]string{"run", "--config", cfg}, extra...), done: make(chan struct{})}
	ready := make(chan struct{})
	go d.readNotify(ln, ready)

	d.cmd = exec.Command(a.Bin, d.Args...)
	d.cmd.Env = a.environ("NOTIFY_SOCKET=" + sock)
	d.cmd.Stdout, d.cmd.Stderr = syncWriter{d}, syncWriter{d}
	// If the test binary dies, the agent is told to tear down.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := testbed.Start(a.HostNS, d.cmd); err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { d.cmd.Wait(); ln.Close(); os.RemoveAll(dir); close(d.done) }()

	select {
	case <-ready:
		// Keep reading notifications (STATUS=, WATCHDOG=1) until exit.
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("vpn-agent run exited before READY=1 (%v):\n%s", d.cmd.ProcessState, d.Output())
	case <-time.After(ReadyTimeout):
		d.cmd.Process.Kill()
		<-d.done
		return nil, fmt.Errorf("vpn-agent run: no READY=1 within %v; notifications %q:\n%s", ReadyTimeout, d.Notifications(), d.Output())
	}
}

type syncWriter struct{ d *Daemon }

func (w syncWriter) Write(b []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.d.output.Write(b)
}

func (d *Daemon) readNotify(ln *net.UnixConn, ready chan struct{}) {
	buf := make([]byte, 4096)
	signalled := false
	for {
		n, err := ln.Read(buf)
		if err != nil {
			return
		}
		msg := string(buf[:n])
		d.mu.Lock()
		d.notify = append(d.notify, msg)
		d.mu.Unlock()
		for _, line := range strings.Split(msg, "\n") {
			if line == "READY=1" && !signalled {
				signalled = true
				close(ready)
			}
		}
	}
}

// Output returns what the agent wrote to stdout and stderr so far.
func (d *Daemon) Output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.output.String()
}

// Notifications returns the sd_notify datagrams received so far.
func (d *Daemon) Notifications() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.notify...)
}

// Pid is the agent's process ID.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Exited reports whether the agent has exited.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// StopTimeout bounds the agent's SIGTERM teardown.
var StopTimeout = 15 * time.Second

// Stop sends SIGTERM and waits for exit. It returns an error if the agent
// had already died, exits non-zero, or needs SIGKILL. Idempotent.
func (d *Daemon) Stop() error {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return nil
	}
	d.stopped = true
	d.mu.Unlock()
	if d.Exited() {
		return fmt.Errorf("agent had exited on its own (%v):\n%s", d.cmd.ProcessState, d.Output())
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if !d.exitWithin(StopTimeout) {
		return fmt.Errorf("agent did not exit within %v of SIGTERM:\n%s", StopTimeout, d.Output())
	}
	if !d.cmd.ProcessState.Success() {
		return fmt.Errorf("agent exit after SIGTERM: %v:\n%s", d.cmd.ProcessState, d.Output())
	}
	return nil
}

// exitWithin waits up to timeout for the agent to exit and reports whether
// it did; if not, it is killed (and waited for).
func (d *Daemon) exitWithin(timeout time.Duration) bool {
	select {
	case <-d.done:
		return true
	case <-time.After(timeout):
		d.cmd.Process.Kill()
		<-d.done
		return false
	}
}

// Wait waits up to timeout for the agent to exit on its own (e.g. after
// `down NAME` signalled it) and returns an error unless it exited 0.
func (d *Daemon) Wait(timeout time.Duration) error {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	if !d.exitWithin(timeout) {
		return fmt.Errorf("agent still running after %v; killed:\n%s", timeout, d.Output())
	}
	if !d.cmd.ProcessState.Success() {
		return fmt.Errorf("agent exit: %v:\n%s", d.cmd.ProcessState, d.Output())
	}
	return nil
}

// Kill sends SIGKILL (a crash: no teardown) and waits for exit.
func (d *Daemon) Kill() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	d.cmd.Process.Kill()
	<-d.done
}
