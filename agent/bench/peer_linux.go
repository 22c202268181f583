package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
)

// RoleEnv, when set in the environment, makes vpn-bench (or the
// bench's test binary) run as one of the bench's helper processes instead
// of a benchmark. The bench sets it for the processes it starts itself.
const RoleEnv = "VPN_AGENT_BENCH_ROLE"

// RolePeer is the provider's userspace WireGuard peer: a process of its
// own in the provider namespace, so its CPU is measured apart from the
// agent's.
const RolePeer = "peer"

// RunRole runs a helper role and returns the process exit code.
func RunRole(role string, in io.Reader, out io.Writer) int {
	if role == RoleAgent {
		return runAgentRole()
	}
	if role != RolePeer {
		fmt.Fprintf(os.Stderr, "vpn-bench: unknown helper role %q\n", role)
		return 2
	}
	if err := runPeer(in, out); err != nil {
		fmt.Fprintf(os.Stderr, "vpn-bench peer: %v\n", err)
		return 1
	}
	return 0
}

// runPeer is the peer process: it reads a provider config, starts it in
// its own (provider) namespace, says "ready", and runs until stdin is
// closed or SIGTERM arrives.
func runPeer(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	var c provider.Config
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	p, err := provider.Start(&c)
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Fprintln(out, "ready")
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, io.MultiReader(dec.Buffered(), in))
		close(eof)
	}()
	select {
	case <-term:
	case <-eof:
	}
	return nil
}

// peerProc is a running peer: a helper process (userspace) or a kernel
// link (PID 0: its CPU is kernel time, not attributable to a process).
type peerProc struct {
	kind  string
	pid   int
	stdin io.WriteCloser
	cmd   *exec.Cmd
}

// peerConfigFor returns the provider's configuration: WireGuard (kernel
// or userspace) with one peer for each agent's tunnel and each reference
// tunnel, and no servers (the bench starts its own).
func (t *topo) peerConfigFor(kernel bool, mtu int) *provider.Config {
	return &provider.Config{
		Log: filepath.Join(t.Dir, "peer-events.log"),
		WireGuard: &provider.WireGuard{
			Interface: t.PeerIf, PrivateKey: t.PeerKey.String(), ListenPort: peerPort, MTU: mtu,
			Kernel: kernel, NoIPv6: true,
			Addresses: []string{tunnelPeer + "/32", refServer + "/32", sysRefServer + "/32"},
			Routes: []provider.Route{
				{Dst: tunnelAgent + "/32", Src: tunnelPeer},
				{Dst: tunnelUnb + "/32", Src: tunnelPeer},
				{Dst: tunnelSide + "/32", Src: tunnelPeer},
				{Dst: tunnelRef + "/32", Src: refServer},
				{Dst: tunnelSysRef + "/32", Src: sysRefServer},
			},
			Peers: []provider.Peer{
				{PublicKey: t.AgentKey.PublicKey().String(), AllowedIPs: []string{tunnelAgent + "/32"}},
				{PublicKey: t.UnbKey.PublicKey().String(), AllowedIPs: []string{tunnelUnb + "/32"}},
				{PublicKey: t.SideKey.PublicKey().String(), AllowedIPs: []string{tunnelSide + "/32"}},
				{PublicKey: t.RefKey.PublicKey().String(), AllowedIPs: []string{tunnelRef + "/32"}},
				{PublicKey: t.SysRefKey.PublicKey().String(), AllowedIPs: []string{tunnelSysRef + "/32"}},
			},
		},
	}
}

// startPeer starts the provider's WireGuard: a kernel link when the agent
// uses the kernel backend, else the userspace helper process.
func (t *topo) startPeer(kernel bool, mtu int) (*peerProc, error) {
	return t.startProvider(t.peerConfigFor(kernel, mtu), "peer.log")
}

// startProvider starts a provider in the provider namespace: in the
// bench's process for a kernel link, else as a helper process logging to
// logName in the work dir. It is stopped when the topology closes.
func (t *topo) startProvider(c *provider.Config, logName string) (*peerProc, error) {
	if c.WireGuard.Kernel {
		var p *provider.Provider
		err := t.prov.Do(func() (err error) { p, err = provider.Start(c); return err })
		if err == nil {
			t.onClose(p.Close)
		}
		return &peerProc{kind: "kernel WireGuard link"}, err
	}
	p, err := spawnPeer(func(cmd *exec.Cmd) error { return t.prov.Do(cmd.Start) }, filepath.Join(t.Dir, logName), c)
	if err != nil {
		return nil, err
	}
	p.kind = "userspace wireguard-go (embedded, helper process)"
	t.onClose(p.stop)
	return p, nil
}

// spawnPeer starts a provider as the bench's helper process (RolePeer),
// with start (which picks its namespace), its stderr in logPath, and
// waits until it is ready. On error nothing is left running.
func spawnPeer(start func(*exec.Cmd) error, logPath string, c *provider.Config) (*peerProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("peer log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), RoleEnv+"="+RolePeer)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := start(cmd); err != nil {
		return nil, fmt.Errorf("start peer process: %w", err)
	}
	p := &peerProc{kind: "userspace wireguard-go (helper process)", pid: cmd.Process.Pid, stdin: stdin, cmd: cmd}
	if err := json.NewEncoder(stdin).Encode(c); err != nil {
		p.stop()
		return nil, fmt.Errorf("configure peer process: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("unexpected %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			p.stop()
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("peer process: %v: %s", err, strings.TrimSpace(string(log)))
		}
	case <-time.After(10 * time.Second):
		p.stop()
		return nil, errors.New("peer process: not ready after 10s")
	}
	return p, nil
}

// stop closes the peer's stdin (it exits) and waits, killing it after 5s.
func (p *peerProc) stop() error {
	if p.cmd == nil {
		return nil
	}
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	return nil
}
