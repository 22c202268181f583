package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 20, findings 1, 2, 3 and the clean environment: what a command run
// with `vpn-agent exec --user nobody` cannot do to the caller's terminal,
// to other processes and through io_uring, each next to its positive
// control (the same probe as nobody in the host's namespaces, through
// setpriv, without exec: it succeeds).

// asNobody is setpriv's way to the same user exec --user nobody gives.
var asNobody = []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}

// probeRun is one run of the sandbox probe: its exit code (0 did it, 1
// refused, 2 usage) and output.
type probeRun struct {
	code int
	out  string
}

func (r probeRun) String() string {
	return fmt.Sprintf("exit %d: %s", r.code, strings.TrimSpace(r.out))
}

// runIn runs argv in the simulated host's network namespace (and the
// host's other namespaces) with its output collected.
func runIn(t *testing.T, host string, argv ...string) probeRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testbed.Start(host, cmd); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	return probeRun{exitCode(t, argv, cmd.Wait()), out.String()}
}

// exitCode is the exit status of argv, which ended with err from Wait; a
// command that did not exit (killed, not run) fails t.
func exitCode(t *testing.T, argv []string, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	case err != nil:
		t.Fatalf("%v: %v", argv, err)
	}
	return 0
}

// TestExecSandbox: exec --user nobody refuses the probes of findings 2
// and 3 (other processes, io_uring) that nobody in the host's namespaces
// can do, sees only its own processes, and gets a clean environment.
func TestExecSandbox(t *testing.T) {
	t.Parallel()
	requireProbe(t)
	c := startAgent(t, harness.AgentOptions{})
	p := env.probeBin
	confined := func(argv ...string) probeRun {
		return runIn(t, c.tp.Host, append([]string{env.agentBin, "exec", "--user", "nobody", c.name, "--"}, argv...)...)
	}
	control := func(argv ...string) probeRun {
		return runIn(t, c.tp.Host, append(slices.Clone(asNobody), argv...)...)
	}
	// refused: the confined run must be refused (exit 1, "CHECK
	// refused"), the control must succeed.
	refused := func(t *testing.T, check string, argv ...string) {
		t.Helper()
		if r := control(argv...); r.code != 0 || !strings.Contains(r.out, check+" ok") {
			t.Fatalf("control (nobody without exec) cannot %s: %v (the check below would prove nothing)", check, r)
		}
		if r := confined(argv...); r.code != 1 || !strings.Contains(r.out, check+" refused") {
			t.Errorf("exec --user nobody could %s: %v", check, r)
		}
	}

	// Finding 3: io_uring's IORING_OP_SOCKET made an AF_VSOCK socket that
	// the family filter on socket(2) never saw.
	t.Run("io_uring", func(t *testing.T) {
		refused(t, "iouring-socket", p, "iouring-socket", "vsock")
	})

	// Finding 2: ptrace, process_vm_readv and kcmp on a process of the
	// same user (a child, which even yama's scope 1 allows).
	for _, check := range []string{"ptrace", "process-vm-read", "kcmp"} {
		t.Run(check, func(t *testing.T) {
			script := `sleep 30 & p=$!; "$0" ` + check + ` $p; rc=$?; kill $p; exit $rc`
			refused(t, check, "sh", "-c", script, p)
		})
	}

	// Finding 2: pidfd_getfd took a UDP socket of another nobody process
	// in the host's namespaces; the command cannot even see that process.
	t.Run("pidfd-getfd", func(t *testing.T) {
		pid, fd := udpHolder(t, c.tp.Host)
		refused(t, "pidfd-getfd", p, "pidfd-getfd", strconv.Itoa(pid), strconv.Itoa(fd))
		proc := fmt.Sprintf("test -e /proc/%d && echo visible || echo hidden", pid)
		if r := control("sh", "-c", proc); strings.TrimSpace(r.out) != "visible" {
			t.Fatalf("control: nobody in the host's namespaces does not see pid %d: %v", pid, r)
		}
		if r := confined("sh", "-c", proc); strings.TrimSpace(r.out) != "hidden" {
			t.Errorf("exec --user nobody sees the host's pid %d in /proc: %v", pid, r)
		}
	})

	// Finding 2: its own PID namespace with a fresh /proc: the init and
	// the probe, nothing else.
	t.Run("proc", func(t *testing.T) {
		count := func(r probeRun) int {
			n := -1
			fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(r.out), "proc-pids ok "), "%d pids", &n)
			return n
		}
		if r := control(p, "proc-pids"); r.code != 0 || count(r) < 10 {
			t.Fatalf("control: the host's /proc shows %d processes (%v), want many", count(r), r)
		}
		if r := confined(p, "proc-pids"); r.code != 0 || count(r) < 1 || count(r) > 3 {
			t.Errorf("exec --user nobody sees %d processes (%v), want its own (at most 3: the init, the probe)", count(r), r)
		}
	})

	// The clean environment: nobody's HOME, USER, LOGNAME, a standard
	// PATH (and TERM, if set), nothing of the caller's but what --env
	// names. Root exec keeps the caller's (the control: the marker is
	// there to be seen).
	t.Run("environment", func(t *testing.T) {
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("no user nobody: %v", err)
		}
		envRun := func(args ...string) map[string]string {
			ag := c.ag
			ag.Env = append(slices.Clone(ag.Env), "VPNC_MARKER=caller-secret", "HOME=/root")
			o := ag.Cmd(append(append([]string{"exec"}, args...), "--", "env")...)
			if o.Err != nil {
				t.Fatal(o.String())
			}
			m := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(o.Stdout), "\n") {
				k, v, _ := strings.Cut(l, "=")
				m[k] = v
			}
			return m
		}
		if got := envRun(c.name); got["VPNC_MARKER"] != "caller-secret" || got["HOME"] != "/root" {
			t.Fatalf("control: root exec lacks the caller's environment: %v", got)
		}
		want := map[string]string{
			"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME": nobody.HomeDir, "USER": "nobody", "LOGNAME": "nobody",
		}
		if t, ok := os.LookupEnv("TERM"); ok {
			want["TERM"] = t
		}
		if got := envRun("--user", "nobody", c.name); !mapsEqual(got, want) {
			t.Errorf("exec --user nobody's environment:\n got %v\nwant %v", got, want)
		}
		want["VPNC_MARKER"], want["VPNC_SET"] = "caller-secret", "a=b"
		if got := envRun("--user", "nobody", "--env", "VPNC_MARKER", "--env", "VPNC_SET=a=b", "--env", "VPNC_UNSET", c.name); !mapsEqual(got, want) {
			t.Errorf("exec --user nobody --env ...'s environment:\n got %v\nwant %v", got, want)
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// udpHolder starts a process as nobody in the simulated host's network
// namespace that holds a UDP socket, and returns its pid and the
// socket's descriptor; it is killed at cleanup.
func udpHolder(t *testing.T, host string) (pid, fd int) {
	t.Helper()
	argv := append(slices.Clone(asNobody), "perl", "-MSocket", "-e",
		`socket(my $s, PF_INET, SOCK_DGRAM, 0) or die "socket: $!"; $| = 1; print fileno($s), "\n"; sleep 60`)
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testbed.Start(host, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if fd, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
		t.Fatalf("the UDP holder said %q: %v", line, err)
	}
	return cmd.Process.Pid, fd // setpriv execs perl: the same pid
}

// TestExecTIOCSTI (finding 1): a command run with exec --user cannot
// push input into the terminal of the shell that started it. The test's
// pty is the controlling terminal of vpn-agent exec, as a root shell's is;
// the probe pushes a marker with TIOCSTI into its stdin (the pty) and
// into /dev/tty. Whatever goes in is echoed on the pty's master side.
// The control: the same probe as nobody (setpriv) on the same kind of
// pty, its controlling terminal, succeeds, and the marker comes back.
func TestExecTIOCSTI(t *testing.T) {
	t.Parallel()
	requireProbe(t)
	if b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Skip("dev.tty.legacy_tiocsti=0: this kernel refuses TIOCSTI to everyone without CAP_SYS_ADMIN, so the control cannot succeed")
	}
	c := startAgent(t, harness.AgentOptions{})
	// The first wall: the command's controlling terminal (field 7 of
	// /proc/self/stat, tty_nr) is none, where nobody's own is the pty.
	ttyNr := []string{"awk", "{ print \"tty_nr=\" $7 }", "/proc/self/stat"}
	if r, _ := onPTY(t, c.tp.Host, append(slices.Clone(asNobody), ttyNr...)...); r.code != 0 || !strings.Contains(r.out, "tty_nr=") || strings.Contains(r.out, "tty_nr=0") {
		t.Fatalf("control: nobody on the pty has no controlling terminal: %v", r)
	}
	if r, _ := onPTY(t, c.tp.Host, append([]string{env.agentBin, "exec", "--user", "nobody", c.name, "--"}, ttyNr...)...); r.code != 0 || !strings.Contains(r.out, "tty_nr=0\r\n") {
		t.Errorf("exec --user nobody has a controlling terminal: %v", r)
	}
	// The probe: both walls (that one and the seccomp filter's).
	const marker = "VPNC-INJECTED-7f3a"
	for _, target := range []string{"0", "/dev/tty"} {
		r, echoed := onPTY(t, c.tp.Host, append(slices.Clone(asNobody), env.probeBin, "tiocsti", target, marker)...)
		if r.code != 0 || !strings.Contains(echoed, marker) {
			t.Fatalf("control: nobody cannot push input into its own terminal (%s): %v, the terminal saw %q (the check below would prove nothing)", target, r, echoed)
		}
		r, echoed = onPTY(t, c.tp.Host, env.agentBin, "exec", "--user", "nobody", c.name, "--", env.probeBin, "tiocsti", target, marker)
		if r.code != 1 || !strings.Contains(r.out, "tiocsti refused") || strings.Contains(echoed, marker) {
			t.Errorf("exec --user nobody pushed input into the caller's terminal (%s): %v, the terminal saw %q", target, r, echoed)
		}
	}
}

// onPTY runs argv in host's network namespace in a new session whose
// controlling terminal is a new pty, with stdin, stdout and stderr on it.
// It returns the exit code, and all the terminal's master side read
// (output and echoed input) as both out and echoed.
func onPTY(t *testing.T, host string, argv ...string) (probeRun, string) {
	t.Helper()
	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	err := testbed.Start(host, cmd)
	slave.Close() // the child's copies remain
	if err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	read := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			master.SetReadDeadline(time.Now().Add(20 * time.Second))
			n, err := master.Read(buf)
			b.Write(buf[:n])
			if err != nil { // EIO once every slave descriptor is closed
				read <- b.String()
				return
			}
		}
	}()
	code := exitCode(t, argv, cmd.Wait())
	out := <-read
	return probeRun{code, out}, out
}

// openPTY opens a new pseudo-terminal pair (/dev/ptmx), neither side the
// caller's controlling terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	// Through the raw descriptor: Fd() would make m blocking, and its
	// read deadline useless.
	var n int
	rc, err := m.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
				n, err = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
			}
		})
		err = errors.Join(err, cerr)
	}
	if err != nil {
		m.Close()
		t.Fatalf("unlock the pty, find its number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open the pty's slave: %v", err)
	}
	return m, s
}
