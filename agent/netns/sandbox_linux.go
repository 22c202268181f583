package netns

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// InitCommand is the hidden vpn-agent subcommand ExecAs starts as the
// init of the command's PID namespace (vpn-agent's Main hands it to
// ExecInit). It is no interface: its arguments are ExecAs's to choose.
const InitCommand = "__exec-init"

// ForwardedSignals are the signals ExecAs passes on to the command. The
// command runs in a session of its own, so a terminal's Ctrl-C (SIGINT to
// the caller's foreground process group) no longer reaches it by itself.
var ForwardedSignals = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT}

// ExecAs runs argv inside the named namespace as user c, confined, and
// returns its exit status (128+N when signal N ended it, as a shell
// says). The vpn-agent process stays as the parent; it starts itself
// again (InitCommand) as the init of a new PID namespace, with:
//   - the namespace's network namespace (the starting thread entered it);
//   - a new session (setsid), so the caller's terminal is not the
//     command's controlling terminal and TIOCSTI cannot push input into
//     the caller's shell (stdin, stdout and stderr stay the caller's file
//     descriptors; an interactive shell gets no job control);
//   - a new PID namespace with a fresh /proc: the command sees only its
//     own processes, and cannot name, signal or take descriptors from any
//     other;
//   - a new mount namespace (privateMounts, and /sys and /proc of the
//     namespaces);
//
// and the init, still root, drops to c (dropPrivileges: no capabilities,
// no_new_privs) and installs the seccomp filter (restrictSyscalls) on the
// one thread it then starts the command from. env is the command's whole
// environment (PATH in it finds the command).
//
// The init stays as PID 1 rather than exec'ing the command in its place:
// a PID 1 ignores every signal it has no handler for and must reap
// orphans, which a command does not expect to do. The init forwards
// ForwardedSignals to the command's process group, reaps every process,
// and exits with the command's status when the command exits; the kernel
// then kills whatever the command left running in the PID namespace. If
// the vpn-agent process dies (even of SIGKILL), the init gets SIGKILL
// (PR_SET_PDEATHSIG), and with it every process of the namespace.
func ExecAs(name string, argv, env []string, c *Credential) (int, error) {
	if len(argv) == 0 {
		return 0, fmt.Errorf("no command given")
	}
	if c == nil {
		return 0, fmt.Errorf("no user given")
	}
	ns, err := Open(name)
	if err != nil {
		return 0, err
	}
	defer ns.Close()
	args := append([]string{"vpn-agent", InitCommand, name, c.String(), "--"}, argv...)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, ForwardedSignals...)
	defer signal.Stop(sigs)
	started := make(chan *os.Process, 1)
	done := make(chan error, 1)
	var state *os.ProcessState
	go func() {
		// Never unlocked: the thread leaves the host's network namespace
		// and exits with this goroutine, after the init it started (its
		// parent thread, for PR_SET_PDEATHSIG) has been waited for.
		runtime.LockOSThread()
		if err := vnetns.Set(ns); err != nil {
			done <- fmt.Errorf("enter netns %q: %w", name, err)
			return
		}
		p, err := os.StartProcess("/proc/self/exe", args, &os.ProcAttr{
			Env:   env,
			Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
			Sys: &syscall.SysProcAttr{
				Setsid:     true,
				Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS,
				// Go's check after setting it (is the parent still the
				// one that forked?) sees 0 in a new PID namespace and
				// signals the child itself: a PID 1 ignores that.
				Pdeathsig: unix.SIGKILL,
			},
		})
		if err != nil {
			done <- fmt.Errorf("start the command's init: %w", err)
			return
		}
		started <- p
		state, err = p.Wait()
		done <- err
	}()
	var p *os.Process
	var early []os.Signal // signals before the init started: passed on once it has
	for {
		select {
		case p = <-started:
			for _, s := range early {
				p.Signal(s)
			}
		case s := <-sigs:
			if p == nil {
				early = append(early, s)
				continue
			}
			p.Signal(s) // the init passes it on; an init that has exited needs none
		case err := <-done:
			if err != nil {
				return 0, err
			}
			return exitStatus(state.Sys().(syscall.WaitStatus)), nil
		}
	}
}

// exitStatus is a shell's $? for a wait status.
func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func (c *Credential) String() string {
	gs := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		gs[i] = strconv.FormatUint(uint64(g), 10)
	}
	return fmt.Sprintf("%d:%d:%s", c.UID, c.GID, strings.Join(gs, ","))
}

func parseCredential(s string) (*Credential, error) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return nil, fmt.Errorf("credential %q: want UID:GID:GROUPS", s)
	}
	n := func(s string) (uint32, error) {
		v, err := strconv.ParseUint(s, 10, 32)
		return uint32(v), err
	}
	c := &Credential{}
	var err1, err2 error
	c.UID, err1 = n(f[0])
	c.GID, err2 = n(f[1])
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("credential %q: %w", s, err)
	}
	if f[2] != "" {
		for _, g := range strings.Split(f[2], ",") {
			v, err := n(g)
			if err != nil {
				return nil, fmt.Errorf("credential %q: %w", s, err)
			}
			c.Groups = append(c.Groups, v)
		}
	}
	return c, nil
}

// ExecInit is InitCommand: the init of ExecAs's PID namespace. args are
// NAME UID:GID:GROUPS -- ARGV...; the environment is the command's. It
// returns the exit status for the process (the command's, or 1 with a
// message on stderr when the sandbox could not be set up; 127 and 126 as
// exec's).
func ExecInit(args []string) int {
	fail := func(code int, err error) int {
		fmt.Fprintf(os.Stderr, "vpn-agent: exec: %v\n", err)
		return code
	}
	// Only ever the first process of a new PID namespace (and so of the
	// new mount namespace ExecAs made with it): anywhere else, the mounts
	// below would cover the host's /proc.
	if os.Getpid() != 1 {
		return fail(2, fmt.Errorf("%s is vpn-agent exec's own, not a command", InitCommand))
	}
	if len(args) < 4 || args[2] != "--" {
		return fail(2, fmt.Errorf("%s: want NAME UID:GID:GROUPS -- CMD [ARG...]", InitCommand))
	}
	name, argv := args[0], args[3:]
	c, err := parseCredential(args[1])
	if err != nil {
		return fail(2, err)
	}
	if err := privateMounts(name); err != nil {
		return fail(1, err)
	}
	mountSys(name)
	// The old /proc shows the host's processes: a fresh one, of this PID
	// namespace, shows only the command's.
	if err := unix.Unmount("/proc", unix.MNT_DETACH); err != nil {
		return fail(1, fmt.Errorf("unmount the host's /proc: %w", err))
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail(1, fmt.Errorf("mount /proc: %w", err))
	}
	// Before the command starts, so no signal meant for it is lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, ForwardedSignals...)
	pid, err := startConfined(argv, os.Environ(), c)
	if err != nil {
		var ee *ExecError
		if errors.As(err, &ee) {
			return fail(ee.Code, ee)
		}
		return fail(1, err)
	}
	go func() {
		for s := range sigs {
			unix.Kill(-pid, s.(syscall.Signal)) // its process group, as a terminal's Ctrl-C
		}
	}()
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return fail(1, fmt.Errorf("wait for %s: %w", argv[0], err))
		case wpid == pid:
			return exitStatus(syscall.WaitStatus(ws))
		}
		// Any other process: an orphan reparented to this init, reaped.
	}
}

// startConfined starts argv as c, from a thread of its own that first
// drops to c and installs the seccomp filter: a forked child inherits
// the forking thread's credentials, capabilities, no_new_privs and filter,
// whatever the process's other threads hold. The command gets a process
// group of its own (signals go to it whole). The thread is never given
// back: it dies with its goroutine.
func startConfined(argv, env []string, c *Credential) (int, error) {
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := dropPrivileges(c); err != nil {
			ch <- result{err: err}
			return
		}
		if err := restrictSyscalls(); err != nil {
			ch <- result{err: err}
			return
		}
		// As the user (search and execute permission are the user's),
		// with the command's PATH (this process's environment).
		path, err := lookPath(argv[0])
		if err != nil {
			ch <- result{err: err}
			return
		}
		pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
			Env:   env,
			Files: []uintptr{0, 1, 2},
			Sys:   &syscall.SysProcAttr{Setpgid: true},
		})
		if err != nil {
			err = execErr(argv[0], path, err)
		}
		ch <- result{pid, err}
	}()
	r := <-ch
	return r.pid, r.err
}
