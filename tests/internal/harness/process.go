package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
)

// Process is a provider-binary instance (WireGuard provider or decoy)
// running in one namespace. Its log accumulates across restarts.
type Process struct {
	Name   string // for messages: "provider", "decoy"
	NS     string
	Bin    string
	Config string // provider.Config JSON path
	Log    string // event log path

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	stderr bytes.Buffer
}

// readyTimeout bounds how long a start may take to log EvReady (generous:
// a TCG guest on a loaded machine once needed more than 10 s).
const readyTimeout = 30 * time.Second

// Start starts the process and waits until it logs that it is ready.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.Name)
	}
	before := p.count(provider.EvReady)
	cmd := exec.Command(p.Bin, "-config", p.Config)
	p.stderr.Reset()
	cmd.Stdout, cmd.Stderr = &p.stderr, &p.stderr
	// Die with the test binary, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testbed.Start(p.NS, cmd); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(readyTimeout)
	for p.count(provider.EvReady) == before {
		select {
		case <-done:
			return fmt.Errorf("%s exited before ready (%v): %s", p.Name, cmd.ProcessState, p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("%s: not ready after %v: %s", p.Name, readyTimeout, p.stderr.String())
		}
	}
	p.cmd, p.done = cmd, done
	return nil
}

// Stop sends SIGTERM and waits for a clean exit (SIGKILL after 5 s). It is
// a no-op if the process is not running.
func (p *Process) Stop() error {
	return p.signal(syscall.SIGTERM)
}

// Kill stops the process with SIGKILL (no cleanup).
func (p *Process) Kill() error {
	return p.signal(syscall.SIGKILL)
}

func (p *Process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s: did not exit on %v: %s", p.Name, sig, p.stderr.String())
	}
	if sig == syscall.SIGTERM && !cmd.ProcessState.Success() {
		return fmt.Errorf("%s: exit %v: %s", p.Name, cmd.ProcessState, p.stderr.String())
	}
	return nil
}

// Running reports whether the process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Events returns the whole log so far.
func (p *Process) Events() ([]provider.Event, error) {
	return provider.ReadLog(p.Log)
}

// Mark returns the current log length, for HitsSince.
func (p *Process) Mark() int {
	ev, _ := p.Events()
	return len(ev)
}

// HitsSince returns the DNS/TCP/UDP events logged after mark, i.e. every
// query and connection the servers received.
func (p *Process) HitsSince(mark int) ([]provider.Event, error) {
	ev, err := p.Events()
	if err != nil {
		return nil, err
	}
	if mark > len(ev) {
		return nil, errors.New(p.Name + ": log shrank")
	}
	var out []provider.Event
	for _, e := range ev[mark:] {
		switch e.Kind {
		case provider.EvDNS, provider.EvTCP, provider.EvUDP:
			out = append(out, e)
		}
	}
	return out, nil
}

// Errors returns the error events logged so far.
func (p *Process) Errors() []provider.Event {
	ev, _ := p.Events()
	var out []provider.Event
	for _, e := range ev {
		if e.Kind == provider.EvError {
			out = append(out, e)
		}
	}
	return out
}

func (p *Process) count(kind string) int {
	ev, _ := p.Events()
	n := 0
	for _, e := range ev {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
