package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/cli"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// RoleAgent is `vpn-agent` itself: without a vpn-agent binary (see
// findAgent) the bench re-executes itself as the agent's command line
// (agent/cli, the code of the vpn-agent binary).
const RoleAgent = "agent"

func runAgentRole() int { return cli.Main(os.Args[1:]) }

// command is an exec.Cmd of the agent binary with args. The bench
// re-executed as the agent is named vpn-agent in its argv[0], as an
// installed agent is (status tells a running agent by its command line).
func (b *Binary) command(args ...string) *exec.Cmd {
	cmd := exec.Command(b.Path, args...)
	cmd.Env = os.Environ()
	if b.Source == selfAgent {
		cmd.Args[0] = "vpn-agent"
		cmd.Env = append(cmd.Env, RoleEnv+"="+RoleAgent)
	}
	return cmd
}

// agentProc is a running `vpn-agent run`, started in a namespace that
// stands in for the host, as its own process: the way users run it.
type agentProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
	// notify is the private sd_notify socket it reports READY=1 on (nil
	// when started without one).
	notify *net.UnixConn
	// Ready is the time from the start of the process to READY=1: what
	// systemd waits for before it starts the confined services.
	Ready time.Duration
	start time.Time
}

// startAgent starts bin with args (after "run") in namespace ns, its
// output in logPath. With notifyPath it listens there as systemd would
// (NOTIFY_SOCKET) so that waitReady can time READY=1. The agent gets
// SIGTERM (and tears its namespace down) if the bench dies.
func startAgent(bin *Binary, ns, logPath, notifyPath string, args ...string) (*agentProc, error) {
	return startAgentIn(bin, ns, "", logPath, notifyPath, args...)
}

// startAgentIn is startAgent with the process started in cgroup v2
// directory cgroupDir ("": the bench's own), as a container runtime
// starts a container's process in the container's cgroup.
func startAgentIn(bin *Binary, ns, cgroupDir, logPath, notifyPath string, args ...string) (*agentProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("agent log: %w", err)
	}
	defer logf.Close()
	a := &agentProc{done: make(chan struct{}), log: logPath}
	cmd := bin.command(append([]string{"run"}, args...)...)
	if notifyPath != "" {
		os.Remove(notifyPath)
		if a.notify, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"}); err != nil {
			return nil, fmt.Errorf("notify socket: %w", err)
		}
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+notifyPath)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if cgroupDir != "" {
		cg, err := os.Open(cgroupDir)
		if err != nil {
			a.closeNotify()
			return nil, fmt.Errorf("agent cgroup: %w", err)
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	a.cmd = cmd
	a.start = time.Now()
	if err := testbed.Start(ns, cmd); err != nil {
		a.closeNotify()
		return nil, err
	}
	go func() { a.err = cmd.Wait(); close(a.done) }()
	return a, nil
}

func (a *agentProc) pid() int { return a.cmd.Process.Pid }

func (a *agentProc) closeNotify() {
	if a.notify != nil {
		a.notify.Close()
		os.Remove(a.notify.LocalAddr().String())
		a.notify = nil
	}
}

// waitReady waits for READY=1 on the notify socket and records Ready.
func (a *agentProc) waitReady(timeout time.Duration) error {
	if a.notify == nil {
		return errors.New("agent started without a notify socket")
	}
	defer a.closeNotify()
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		a.notify.SetReadDeadline(time.Now().Add(timeout))
		for {
			n, err := a.notify.Read(buf)
			if err != nil {
				got <- err
				return
			}
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				if l == "READY=1" {
					got <- nil
					return
				}
			}
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("vpn-agent run: no READY=1 within %s: %v: %s", timeout, err, a.tail())
		}
		a.Ready = time.Since(a.start)
		return nil
	case <-a.done:
		return fmt.Errorf("vpn-agent run exited before it was ready: %v: %s", a.err, a.tail())
	}
}

// stop sends SIGTERM (the agent tears its namespace down and waits until
// the kernel removed the tunnel interface) and waits; after 15 s it kills
// the process, and reports that. took is SIGTERM to exit.
func (a *agentProc) stop() (took time.Duration, err error) {
	a.closeNotify()
	select {
	case <-a.done:
		return 0, fmt.Errorf("vpn-agent run exited early: %v: %s", a.err, a.tail())
	default:
	}
	t0 := time.Now()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		took = time.Since(t0)
		if a.err != nil {
			return took, fmt.Errorf("vpn-agent run: %v: %s", a.err, a.tail())
		}
		return took, nil
	case <-time.After(15 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
		return 0, errors.New("vpn-agent run did not stop within 15s of SIGTERM; killed")
	}
}

// pause waits d; it returns early with an error if the agent exits (when,
// e.g. "during the failover", says in which phase) or ctx ends.
func (a *agentProc) pause(ctx context.Context, d time.Duration, when string) error {
	select {
	case <-a.done:
		return fmt.Errorf("vpn-agent run exited %s: %v: %s", when, a.err, a.tail())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// tail is the end of the agent's log, for errors.
func (a *agentProc) tail() string { return a.tailN(300) }

func (a *agentProc) tailN(n int) string {
	b, _ := os.ReadFile(a.log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}
