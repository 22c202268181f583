package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/daemon"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

func cmdRun(args []string, out io.Writer) int {
	fs, level, format := flags("run")
	cfg := fs.String("config", "", "config file (JSON)")
	interval := fs.Duration("check-interval", time.Second, "how often the watchdog checks the namespace")
	adopt := fs.Bool("adopt", false, adoptHelp)
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if rc := needRoot("run", "it creates the namespace, the tunnel and the kill switch"); rc >= 0 {
		return rc
	}
	log, s, eng, abs, err := prepare(*cfg, *level, *format, *adopt)
	if err != nil {
		return fail(err)
	}
	load := func() (*config.Spec, error) { return loadSpec(abs, false) }
	if err := daemon.Run(context.Background(), eng, s, daemon.Options{ConfigPath: abs, Interval: *interval, Log: log, Load: load}); err != nil {
		return fail(err)
	}
	return ExitOK
}

func cmdUp(args []string, out io.Writer) int {
	fs, level, format := flags("up")
	cfg := fs.String("config", "", "config file (JSON)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for a detached userspace agent to become ready (and, with --wait-handshake, for the first handshake)")
	waitHS := fs.Bool("wait-handshake", false, "return only once the first WireGuard handshake completed; if none within --timeout, exit 1, and a namespace this up brought up is taken down again (one that was up already stays as it was)")
	adopt := fs.Bool("adopt", false, adoptHelp)
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if rc := needRoot("up", "it creates the namespace, the tunnel and the kill switch"); rc >= 0 {
		return rc
	}
	start := time.Now()
	_, s, eng, abs, err := prepare(*cfg, *level, *format, *adopt)
	if err != nil {
		return fail(err)
	}
	backend, err := eng.Backend(s)
	if err != nil {
		return fail(err)
	}
	// The userspace data plane lives in a process, and so do metrics, the
	// health probe, port forwarding and failover: for those `up` starts a
	// detached `vpn-agent run`, with either backend.
	detach := backend == config.BackendUserspace || len(agentFields(s)) > 0
	// An agent already holding the namespace is the converged state, or
	// applies the new config (SIGHUP). The lock may be held by a running
	// agent or by another `up` that is starting one: wait for a ready
	// agent before claiming so.
	if l, err := engine.TryLock(s.Name); errors.Is(err, engine.ErrBusy) && (detach || agentPID(s.Name) > 0) {
		pid, werr := waitReadyAgent(s.Name, *timeout)
		if werr != nil {
			return fail(fmt.Errorf("%v; %v", err, werr))
		}
		if rc := upRunning(out, s, abs, pid, *timeout); rc != ExitOK {
			return rc
		}
		return handshakeResult(out, "", *waitHS, s, *timeout-time.Since(start), nil)
	} else if err == nil {
		l.Release(true)
	}
	if detach {
		// A kernel namespace `up` left without an agent takes a new
		// config's live parts from the agent's own bring-up; one that
		// differs in any other part is refused before anything changes.
		_, _, _, wasUp, err := runningDiff(s)
		if err != nil {
			return fail(err)
		}
		// Refuse here, in one line, what the detached agent would refuse.
		if err := eng.CheckOwnership(s); err != nil {
			return fail(err)
		}
		pid, err := startDetached(abs, s.Name, *timeout, *adopt)
		if err != nil {
			return fail(err)
		}
		upMsg := fmt.Sprintf("namespace %s up (%s backend, agent pid %d; stop it with vpn-agent down %s)", s.Name, backend, pid, s.Name)
		return handshakeResult(out, upMsg, *waitHS, s, *timeout-time.Since(start), undoUnless(wasUp, s.Name))
	}
	// Up converges a namespace that is up already, applying a new
	// config's live parts; one that differs in any other part is refused
	// before anything changes.
	_, live, _, wasUp, err := runningDiff(s)
	if err != nil {
		return fail(err)
	}
	inst, err := eng.Up(context.Background(), s, abs)
	if err != nil {
		return fail(err)
	}
	inst.Release()
	if len(live) > 0 {
		fmt.Fprintf(out, "namespace %s reloaded (changed: %s)\n", s.Name, strings.Join(live, ", "))
		return ExitOK
	}
	return handshakeResult(out, fmt.Sprintf("namespace %s up (%s backend)", s.Name, inst.Backend), *waitHS, s, *timeout-time.Since(start), undoUnless(wasUp, s.Name))
}

// agentFields names the fields of s that only a running agent serves:
// kernel-backend `up` without them needs no process once the namespace is
// up, with them it leaves an agent running (vpn-agent down stops it).
func agentFields(s *config.Spec) []string {
	var f []string
	if s.Metrics != nil {
		f = append(f, "metrics")
	}
	if s.Probe != nil {
		f = append(f, "health.probe")
	}
	if s.PortForward != nil {
		f = append(f, "portForwarding")
	}
	if len(s.Pool) > 1 {
		f = append(f, "wireguard.configFiles")
	}
	return f
}

// agentPID is the pid of the agent the state file names, if it runs (0
// for a kernel namespace `up` left without one).
func agentPID(name string) int {
	if st, err := engine.ReadState(name); err == nil && st.PID > 0 && syscall.Kill(st.PID, 0) == nil {
		return st.PID
	}
	return 0
}

// handshakeResult is up's exit status once the namespace is up, printing
// upMsg (if any) when it succeeds: with --wait-handshake, 1 (one line)
// when no handshake completed in the time left. Then undo, given when
// this up brought the namespace up, takes it down again, so that a failed
// up leaves nothing; a namespace that was up before stays up and closed.
func handshakeResult(out io.Writer, upMsg string, wait bool, s *config.Spec, left time.Duration, undo func() error) int {
	if wait {
		if err := waitHandshake(s, max(left, time.Second)); err != nil {
			switch {
			case undo == nil:
				err = fmt.Errorf("%w; it stays up as it was before this up (closed until vpn-agent down %s)", err, s.Name)
			case undo() != nil:
				err = fmt.Errorf("%w; taking it down again failed too: run vpn-agent down %s", err, s.Name)
			default:
				err = fmt.Errorf("%w; this up brought it up and took it down again: nothing is left", err)
			}
			return fail(err)
		}
	}
	if upMsg != "" {
		fmt.Fprintln(out, upMsg)
	}
	return ExitOK
}

// undoUnless is up's undo for a namespace this up brought up: nil when
// it was up before.
func undoUnless(wasUp bool, name string) func() error {
	if wasUp {
		return nil
	}
	return takeDown(name)
}

// takeDown is down of namespace name as up's undo, quietly (up prints
// one line).
func takeDown(name string) func() error {
	return func() error {
		_, err := newEngine(slog.New(slog.DiscardHandler)).Down(name, 15*time.Second, false)
		return err
	}
}

func cmdDown(args []string, out io.Writer) int {
	fs, level, format := flags("down")
	timeout := fs.Duration("timeout", 15*time.Second, "how long to wait for a running agent to stop")
	force := fs.Bool("force", false, "a namespace that is not up is not an error (nothing to remove, exit 0)")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if rc := needRoot("down", "it removes the namespace, the tunnel and the kill switch"); rc >= 0 {
		return rc
	}
	name, err := nameArg(fs)
	if err != nil {
		return fail(err)
	}
	res, err := newEngine(newLogger(*level, *format)).Down(name, *timeout, *force)
	if err != nil {
		return fail(err)
	}
	if len(res.Left) > 0 {
		fmt.Fprintf(os.Stderr, "vpn-agent: warning: left %s alone: not created by vpn-agent\n", strings.Join(res.Left, ", "))
	}
	if n := len(res.Stranded); n > 0 {
		pids := strings.Trim(fmt.Sprint(res.Stranded), "[]")
		fmt.Fprintf(os.Stderr, "vpn-agent: warning: %s %s still in namespace %s: %s on with no network (only loopback); stop %s\n",
			plural(n, "pid", "pids"), pids, name, plural(n, "it runs", "they run"), plural(n, "it", "them"))
	}
	if res.NotUp {
		fmt.Fprintf(out, "namespace %s is not up: nothing to remove\n", name)
		return ExitOK
	}
	fmt.Fprintf(out, "namespace %s down\n", name)
	return ExitOK
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

const adoptHelp = "take over a namespace, or host links named after it, that vpn-agent did not create (their routes, addresses and firewall are replaced)"

// prepare is what run and up share: a logger, the resolved config (its
// warnings logged), an engine (adopting what it finds when adopt) and the
// config's absolute path for state, once the preflight checks passed.
func prepare(cfg, level, format string, adopt bool) (*slog.Logger, *config.Spec, *engine.Engine, string, error) {
	log := newLogger(level, format)
	s, err := loadSpec(cfg, false)
	if err != nil {
		return nil, nil, nil, "", err
	}
	for _, w := range s.Warnings {
		log.Warn("wg-quick file", "ignored", w)
	}
	abs, err := filepath.Abs(cfg)
	if err != nil {
		return nil, nil, nil, "", err
	}
	eng := newEngine(log)
	eng.Adopt = adopt
	if err := preflight(eng, s); err != nil {
		return nil, nil, nil, "", err
	}
	return log, s, eng, abs, nil
}

func newEngine(log *slog.Logger) *engine.Engine {
	e := &engine.Engine{Log: log}
	e.AfterStep = faultHook()
	return e
}

// startDetached starts `vpn-agent run` in its own session and waits for
// READY=1 on a private notify socket, as systemd would.
func startDetached(cfg, name string, timeout time.Duration, adopt bool) (int, error) {
	// The notify socket lives in a root-only directory under the runtime
	// dir, never in /tmp, where another user could put a socket of their
	// own at the name once this one is gone.
	if err := os.MkdirAll(names.RuntimeDir, 0o755); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp(names.RuntimeDir, ".up-"+name+"-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return 0, fmt.Errorf("notify socket: %w", err)
	}
	defer conn.Close()
	if err := os.MkdirAll(names.StateDir(name), 0o755); err != nil {
		return 0, err
	}
	// Each start logs to its own file, renamed to agent.log once ready, so
	// a concurrent start that loses never touches the winner's files.
	logPath := filepath.Join(names.StateDir(name), fmt.Sprintf("start-%d.log", os.Getpid()))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	argv := []string{"run", "--config", cfg}
	if adopt {
		argv = append(argv, "--adopt")
	}
	cmd := exec.Command(self, argv...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start agent: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ready := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			if containsLine(string(buf[:n]), "READY=1") {
				close(ready)
				return
			}
		}
	}()
	// Forward Ctrl-C to the child so an interrupted up leaves nothing.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case <-ready:
		os.Rename(logPath, names.AgentLog(name))
		return cmd.Process.Pid, nil
	case err := <-exited:
		msg := lastLine(logPath)
		cleanFailedStart(name, logPath)
		if cmd.ProcessState.ExitCode() == ExitBadInput {
			// The agent found bad input only the host reveals (e.g. a
			// metrics address in use): up reports it as such.
			return 0, &childBadInput{strings.TrimPrefix(msg, "vpn-agent: ")}
		}
		return 0, fmt.Errorf("agent exited before ready (%v): %s", err, msg)
	case <-sigs:
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		cleanFailedStart(name, logPath)
		return 0, errors.New("interrupted; the agent was stopped")
	case <-time.After(timeout):
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		msg := lastLine(logPath)
		cleanFailedStart(name, logPath)
		return 0, fmt.Errorf("agent not ready after %s; stopped it: %s", timeout, msg)
	}
}

// waitReadyAgent waits until the namespace has a state file naming a live
// agent that holds the lock (it writes the state just before READY=1).
func waitReadyAgent(name string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		if st, err := engine.ReadState(name); err == nil && st.PID > 0 && syscall.Kill(st.PID, 0) == nil {
			if l, err := engine.TryLock(name); errors.Is(err, engine.ErrBusy) {
				return st.PID, nil
			} else if err == nil {
				l.Release(false)
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no agent became ready within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanFailedStart removes the log of an agent that never became ready,
// and the runtime directory if nothing else lives there.
func cleanFailedStart(name, logPath string) {
	os.Remove(logPath)
	os.Remove(names.StateDir(name)) // only if empty
}

func containsLine(msg, line string) bool {
	sc := bufio.NewScanner(stringsReader(msg))
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
}

// lastLine returns the agent's last log line: its error.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var last string
	sc := bufio.NewScanner(stringsReader(string(b)))
	for sc.Scan() {
		if t := sc.Text(); t != "" {
			last = t
		}
	}
	return last
}

// childBadInput is the one-line error of a detached agent that exited
// with ExitBadInput before it was ready.
type childBadInput struct{ msg string }

func (e *childBadInput) Error() string { return e.msg }
