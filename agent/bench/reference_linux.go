package bench

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// stockEnv lets the stock wireguard-go run on a kernel it believes has
// WireGuard built in (it refuses otherwise).
const stockEnv = "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1"

// refTunnel is a reference tunnel: a stock wireguard-go binary in the
// foreground, configured with wg, its interface born in the underlay
// namespace and moved into the confined one - the same birthplace trick
// and the same path as the agent's tunnel.
type refTunnel struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
}

// refPath is one reference tunnel's interface, key and addresses.
type refPath struct {
	iface        string
	key          wgtypes.Key
	addr, server string // its tunnel address; the provider address reached only through it
}

// refPathOf returns the path of a reference mode.
func (t *topo) refPathOf(m Mode) refPath {
	if m == ModeSystemRef {
		return refPath{t.SysRefIf, t.SysRefKey, tunnelSysRef, sysRefServer}
	}
	return refPath{t.RefIf, t.RefKey, tunnelRef, refServer}
}

func (t *topo) startReference(wgGo, wg string, mtu int, rp refPath) (*refTunnel, error) {
	logPath := filepath.Join(t.Dir, rp.iface+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("reference log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(wgGo, "-f", rp.iface)
	cmd.Env = append(os.Environ(), stockEnv, "LOG_LEVEL=error")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := t.under.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("start %s: %w", wgGo, err)
	}
	r := &refTunnel{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { cmd.Wait(); close(r.done) }()
	t.onClose(r.stop)
	sock := names.UAPISocket(rp.iface)
	if err := waitUAPI(sock, r.done, 5*time.Second); err != nil {
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("stock wireguard-go %s: %w: %s", wgGo, err, strings.TrimSpace(string(log)))
	}
	key, err := t.writeKey(rp.iface+".key", rp.key)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(wg, "set", rp.iface, "private-key", key, "listen-port", "0",
		"peer", t.PeerKey.PublicKey().String(), "endpoint", fmt.Sprintf("%s:%d", underlayPeer, peerPort),
		"allowed-ips", rp.server+"/32").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("wg set %s: %w: %s", rp.iface, err, strings.TrimSpace(string(out)))
	}
	if err := testbed.MoveLink(t.U, rp.iface, t.C); err != nil {
		return nil, err
	}
	return r, t.configureRefLink(mtu, rp)
}

// configureRefLink gives a reference interface its address and one
// route: only its reference server address goes through it.
func (t *topo) configureRefLink(mtu int, rp refPath) error {
	if err := testbed.SetMTU(t.C, rp.iface, mtu); err != nil {
		return err
	}
	if err := testbed.AddrUp(t.C, rp.iface, netip.PrefixFrom(netip.MustParseAddr(rp.addr), 32)); err != nil {
		return err
	}
	return testbed.RouteDev(t.C, rp.iface, netip.PrefixFrom(netip.MustParseAddr(rp.server), 32))
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

// waitUAPI polls the UAPI socket at path until it accepts a connection,
// dead is closed, or timeout. The file exists from bind(2), before
// listen(2): wg, connecting in between, is refused and falls back to the
// kernel's netlink ("Protocol not supported" without the module).
func waitUAPI(path string, dead <-chan struct{}, timeout time.Duration) error {
	return poll(dead, timeout, func() bool {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "exited before listening on "+path, fmt.Sprintf("%s did not accept connections within %s", path, timeout))
}
