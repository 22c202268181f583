package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// proc is a child process started on a namespace thread. It gets its own
// process group (a terminal's Ctrl-C reaches only the bench, which then
// stops its children in order) and dies with the thread that started it.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	err            error
}

func startProc(th *testbed.Thread, path string, args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command(path, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := th.Do(p.cmd.Start); err != nil {
		return nil, fmt.Errorf("start %s in %s: %w", path, th.NS(), err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// wait waits up to timeout, then kills the process and waits for it.
// It returns the exit error, or an error saying it was killed.
func (p *proc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s: killed after %s", p.cmd.Path, timeout)
	}
}

// kill stops the process now (no-op if it exited).
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuSec is the exited process's user+system CPU seconds.
func (p *proc) cpuSec() float64 {
	if p.cmd.ProcessState == nil {
		return 0
	}
	ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// waitListen polls until pid has a TCP socket listening on port (read from
// /proc/<pid>/net/tcp*, which shows the process's own namespace). A test
// connection would not do: iperf3 -1 serves exactly one client.
func waitListen(pid, port int, dead <-chan struct{}, timeout time.Duration) error {
	want := fmt.Sprintf(":%04X", port)
	return poll(dead, timeout, func() bool {
		return listening(fmt.Sprintf("/proc/%d/net/tcp6", pid), want) || listening(fmt.Sprintf("/proc/%d/net/tcp", pid), want)
	}, fmt.Sprintf("server exited before listening on port %d", port),
		fmt.Sprintf("server not listening on port %d after %s", port, timeout))
}

// poll checks ok every 2 ms until it holds, dead is closed (an error
// saying exited) or timeout passes (an error saying late).
func poll(dead <-chan struct{}, timeout time.Duration, ok func() bool, exited, late string) error {
	deadline := time.Now().Add(timeout)
	for {
		if ok() {
			return nil
		}
		select {
		case <-dead:
			return errors.New(exited)
		default:
		}
		if time.Now().After(deadline) {
			return errors.New(late)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func listening(path, portSuffix string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		// sl local_address rem_address st ...; st 0A is LISTEN.
		if len(fl) > 3 && strings.HasSuffix(fl[1], portSuffix) && fl[3] == "0A" {
			return true
		}
	}
	return false
}

func syscallKill(pid int) { syscall.Kill(pid, syscall.SIGKILL) }
