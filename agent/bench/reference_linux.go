package bench

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// stockEnv lets the stock wireguard-go run on a kernel it believes has
// WireGuard built in (it refuses otherwise).
const stockEnv = "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1"

// refTunnel is the reference tunnel: the stock wireguard-go binary in the
// foreground, configured with wg, its interface born in the underlay
// namespace and moved into the confined one - the same birthplace trick
// and the same path as the agent's tunnel.
type refTunnel struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
}

func (t *topo) startReference(wgGo, wg string, mtu int) (*refTunnel, error) {
	logf, err := os.Create(filepath.Join(t.Dir, "reference.log"))
	if err != nil {
		return nil, fmt.Errorf("reference log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(wgGo, "-f", t.RefIf)
	cmd.Env = append(os.Environ(), stockEnv, "LOG_LEVEL=error")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := t.under.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("start %s: %w", wgGo, err)
	}
	r := &refTunnel{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { cmd.Wait(); close(r.done) }()
	t.onClose(r.stop)
	sock := names.UAPISocket(t.RefIf)
	if err := waitFile(sock, r.done, 5*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(t.Dir, "reference.log"))
		return nil, fmt.Errorf("stock wireguard-go: %w: %s", err, strings.TrimSpace(string(log)))
	}
	key, err := t.writeKey("reference.key", t.RefKey)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(wg, "set", t.RefIf, "private-key", key, "listen-port", "0",
		"peer", t.PeerKey.PublicKey().String(), "endpoint", fmt.Sprintf("%s:%d", underlayPeer, peerPort),
		"allowed-ips", refServer+"/32").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("wg set %s: %w: %s", t.RefIf, err, strings.TrimSpace(string(out)))
	}
	if err := testbed.MoveLink(t.U, t.RefIf, t.C); err != nil {
		return nil, err
	}
	return r, t.configureRefLink(mtu)
}

// configureRefLink gives the reference interface its address and one
// route: only the reference server address goes through it.
func (t *topo) configureRefLink(mtu int) error {
	if err := testbed.SetMTU(t.C, t.RefIf, mtu); err != nil {
		return err
	}
	if err := testbed.AddrUp(t.C, t.RefIf, netip.PrefixFrom(netip.MustParseAddr(tunnelRef), 32)); err != nil {
		return err
	}
	return testbed.RouteDev(t.C, t.RefIf, netip.PrefixFrom(netip.MustParseAddr(refServer), 32))
}

// stop terminates the stock wireguard-go (its interface goes with it).
func (r *refTunnel) stop() error {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(3 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
	return nil
}

// waitFile polls for path until it exists, dead is closed, or timeout.
func waitFile(path string, dead <-chan struct{}, timeout time.Duration) error {
	return poll(dead, timeout, func() bool { _, err := os.Stat(path); return err == nil },
		"exited before creating "+path, fmt.Sprintf("%s did not appear within %s", path, timeout))
}
