package bench

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
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

// peerConfig is what the bench sends the peer process on stdin.
type peerConfig struct {
	Interface  string      `json:"interface"`
	PrivateKey wgtypes.Key `json:"privateKey"`
	ListenPort int         `json:"listenPort"`
	MTU        int         `json:"mtu"`
	Addresses  []string    `json:"addresses"` // CIDRs on the interface
	Routes     []peerRoute `json:"routes"`    // routed into it
	Peers      []peerEntry `json:"peers"`
}

// peerRoute routes Dst into the peer's interface with source address Src,
// so that replies (UDP ones included, whose source the kernel picks from
// the route) come from the address the client talked to.
type peerRoute struct {
	Dst string `json:"dst"`
	Src string `json:"src"`
}

type peerEntry struct {
	PublicKey  wgtypes.Key `json:"publicKey"`
	AllowedIPs []string    `json:"allowedIPs"`
}

func (c *peerConfig) uapi() string {
	var b strings.Builder
	fmt.Fprintf(&b, "private_key=%s\nlisten_port=%d\nreplace_peers=true\n", hex.EncodeToString(c.PrivateKey[:]), c.ListenPort)
	for _, p := range c.Peers {
		fmt.Fprintf(&b, "public_key=%s\nreplace_allowed_ips=true\n", hex.EncodeToString(p.PublicKey[:]))
		for _, a := range p.AllowedIPs {
			fmt.Fprintf(&b, "allowed_ip=%s\n", a)
		}
	}
	return b.String()
}

func (c *peerConfig) wgctrl() (wgtypes.Config, error) {
	key, port := c.PrivateKey, c.ListenPort
	cfg := wgtypes.Config{PrivateKey: &key, ListenPort: &port, ReplacePeers: true}
	for _, p := range c.Peers {
		pc := wgtypes.PeerConfig{PublicKey: p.PublicKey, ReplaceAllowedIPs: true}
		for _, a := range p.AllowedIPs {
			pfx, err := netip.ParsePrefix(a)
			if err != nil {
				return cfg, fmt.Errorf("peer allowed IP %q: %w", a, err)
			}
			pc.AllowedIPs = append(pc.AllowedIPs, *ipNet(pfx))
		}
		cfg.Peers = append(cfg.Peers, pc)
	}
	return cfg, nil
}

// runPeer is the peer process: it creates a wireguard-go device on a TUN
// in its own (provider) namespace, says "ready", and runs until stdin is
// closed or SIGTERM arrives.
func runPeer(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	var c peerConfig
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	td, err := tun.CreateTUN(c.Interface, c.MTU)
	if err != nil {
		return fmt.Errorf("create tun %s: %w", c.Interface, err)
	}
	dev := device.NewDevice(td, conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, "peer: "))
	defer dev.Close()
	if err := dev.IpcSet(c.uapi()); err != nil {
		return fmt.Errorf("configure device: %w", err)
	}
	if err := dev.Up(); err != nil {
		return fmt.Errorf("device up: %w", err)
	}
	if err := configurePeerLink(&c); err != nil {
		return err
	}
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
	case <-dev.Wait():
		return errors.New("device closed unexpectedly")
	}
	return nil
}

// configurePeerLink addresses, raises and routes the peer's interface in
// the calling thread's namespace.
func configurePeerLink(c *peerConfig) error {
	l, err := netlink.LinkByName(c.Interface)
	if err != nil {
		return fmt.Errorf("find %s: %w", c.Interface, err)
	}
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+c.Interface+"/disable_ipv6", []byte("1\n"), 0o644)
	for _, a := range c.Addresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return fmt.Errorf("peer address %q: %w", a, err)
		}
		if err := netlink.AddrReplace(l, &netlink.Addr{IPNet: ipNet(p)}); err != nil {
			return fmt.Errorf("address %s on %s: %w", a, c.Interface, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", c.Interface, err)
	}
	for _, r := range c.Routes {
		p, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			return fmt.Errorf("peer route %q: %w", r.Dst, err)
		}
		src, err := netip.ParseAddr(r.Src)
		if err != nil {
			return fmt.Errorf("peer route source %q: %w", r.Src, err)
		}
		rt := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(p), Src: src.AsSlice(), Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteReplace(rt); err != nil {
			return fmt.Errorf("route %s dev %s src %s: %w", r.Dst, c.Interface, r.Src, err)
		}
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

// peerConfigFor returns the provider's WireGuard configuration: one peer
// for the agent's tunnel and one for the reference tunnel.
func (t *topo) peerConfigFor(mtu int) *peerConfig {
	return &peerConfig{
		Interface: t.PeerIf, PrivateKey: t.PeerKey, ListenPort: peerPort, MTU: mtu,
		Addresses: []string{tunnelPeer + "/32", refServer + "/32"},
		Routes: []peerRoute{
			{Dst: tunnelAgent + "/32", Src: tunnelPeer},
			{Dst: tunnelRef + "/32", Src: refServer},
		},
		Peers: []peerEntry{
			{PublicKey: t.AgentKey.PublicKey(), AllowedIPs: []string{tunnelAgent + "/32"}},
			{PublicKey: t.RefKey.PublicKey(), AllowedIPs: []string{tunnelRef + "/32"}},
		},
	}
}

// startPeer starts the provider's WireGuard: a kernel link when the agent
// uses the kernel backend, else the userspace helper process.
func (t *topo) startPeer(kernel bool, mtu int) (*peerProc, error) {
	c := t.peerConfigFor(mtu)
	if kernel {
		err := t.prov.Do(func() error { return kernelPeer(c) })
		return &peerProc{kind: "kernel WireGuard link"}, err
	}
	logf, err := os.Create(filepath.Join(t.Dir, "peer.log"))
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
	if err := t.prov.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("start peer process: %w", err)
	}
	p := &peerProc{kind: "userspace wireguard-go (embedded, helper process)", pid: cmd.Process.Pid, stdin: stdin, cmd: cmd}
	t.onClose(p.stop)
	if err := json.NewEncoder(stdin).Encode(c); err != nil {
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
			log, _ := os.ReadFile(filepath.Join(t.Dir, "peer.log"))
			return nil, fmt.Errorf("peer process: %v: %s", err, strings.TrimSpace(string(log)))
		}
	case <-time.After(10 * time.Second):
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

// kernelPeer creates the provider's WireGuard as a kernel link in the
// calling thread's namespace.
func kernelPeer(c *peerConfig) error {
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = c.Interface, c.MTU
	if err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: la}); err != nil {
		return fmt.Errorf("create kernel WireGuard peer %s: %w", c.Interface, err)
	}
	cfg, err := c.wgctrl()
	if err != nil {
		return err
	}
	wc, err := wgctrl.New()
	if err != nil {
		return fmt.Errorf("wgctrl: %w", err)
	}
	defer wc.Close()
	if err := wc.ConfigureDevice(c.Interface, cfg); err != nil {
		return fmt.Errorf("configure kernel WireGuard peer: %w", err)
	}
	return configurePeerLink(c)
}
