// Package topo builds the end-to-end test network: a simulated host, the
// "internet" with decoys, a LAN host and a WireGuard provider, each in a
// network namespace of its own, none linked to the root namespace.
//
//	lan (LANHost4) --lan0-- host (agent runs here) --up0-- inet (decoys) --pv0-- prov (WireGuard peer)
//
// The host's default routes (v4 and v6) point at inet, and the host forwards
// and masquerades like a typical desktop, so anything that escaped a
// confined namespace through the host would reach the decoys.
package topo

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/nsutil"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Options configure New.
type Options struct {
	// ProviderBin is the built tests/cmd/provider binary (required).
	ProviderBin string
	// NoProvider leaves the WireGuard provider stopped (start it with
	// Provider.Start).
	NoProvider bool
}

// Topo is one topology. All fields are read-only.
type Topo struct {
	ID                    string // "vt" + 6 hex digits
	Host, Inet, LAN, Prov string // namespace names
	Dir                   string // configs, keys, logs (mode 0700)
	ProvKey, ClientKey    wgtypes.Key
	Provider, Decoy       *Process
	ProviderIf            string // the provider's TUN name (unique on the machine)
}

// New builds a topology, starts the decoy and (unless opts.NoProvider) the
// provider, and registers cleanup of everything named after its ID.
func New(t testing.TB, opts Options) *Topo {
	t.Helper()
	if opts.ProviderBin == "" {
		t.Fatal("topo.New: Options.ProviderBin is required")
	}
	id, err := newID()
	if err != nil {
		t.Fatal(err)
	}
	tp := &Topo{
		ID:   id,
		Host: id + string(RoleHost), Inet: id + string(RoleInet),
		LAN: id + string(RoleLAN), Prov: id + string(RoleProv),
		Dir:        t.TempDir(),
		ProviderIf: id + "w",
	}
	t.Cleanup(func() {
		if err := tp.destroy(); err != nil {
			t.Errorf("topology %s cleanup: %v", id, err)
		}
	})
	if tp.ProvKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		t.Fatal(err)
	}
	if tp.ClientKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		t.Fatal(err)
	}
	if err := tp.build(); err != nil {
		t.Fatalf("topology %s: %v", id, err)
	}
	if tp.Decoy, err = tp.newDecoy(opts.ProviderBin); err != nil {
		t.Fatal(err)
	}
	if err := tp.Decoy.Start(); err != nil {
		t.Fatal(err)
	}
	if tp.Provider, err = tp.newProvider(opts.ProviderBin); err != nil {
		t.Fatal(err)
	}
	if !opts.NoProvider {
		if err := tp.Provider.Start(); err != nil {
			t.Fatal(err)
		}
	}
	return tp
}

// Name returns the topology's name for a role, e.g. Name(RoleConfined) for
// the agent's namespace. Any lower-case letter is a valid role.
func (tp *Topo) Name(role byte) string { return tp.ID + string(role) }

// Exec runs argv in namespace ns (`ip netns exec`) and fails t on error.
func (tp *Topo) Exec(t testing.TB, ns string, argv ...string) string {
	t.Helper()
	out, err := nsutil.Output(ns, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func (tp *Topo) build() error {
	for _, ns := range []string{tp.Host, tp.Inet, tp.LAN, tp.Prov} {
		if out, err := runIP("netns", "add", ns); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
	}
	// No duplicate address detection (link-local addresses included): an
	// address is usable the moment it is added. Set before links exist,
	// so they inherit it.
	for _, ns := range []string{tp.Host, tp.Inet, tp.LAN, tp.Prov} {
		args := []string{"sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"}
		if ns == tp.Host || ns == tp.Inet {
			args = append(args, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
		}
		if out, err := nsutil.Output(ns, args...); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
	}
	steps := [][]string{
		// veths are created inside the topology's namespaces, never in
		// root. Each end gets its own ifindex: in fresh namespaces both
		// ends would be 2, and the kernel then treats carrier changes as
		// non-urgent, delaying IPv6 readiness by up to a second.
		{"-n", tp.Host, "link", "add", HostUplinkIf, "index", "10", "type", "veth", "peer", "name", InetHostIf, "index", "11", "netns", tp.Inet},
		{"-n", tp.Host, "link", "add", HostLANIf, "index", "12", "type", "veth", "peer", "name", LANIf, "index", "13", "netns", tp.LAN},
		{"-n", tp.Inet, "link", "add", InetProvIf, "index", "14", "type", "veth", "peer", "name", ProvUplinkIf, "index", "15", "netns", tp.Prov},
	}
	addr := func(ns, dev string, a netip.Addr, bits int) []string {
		s := []string{"-n", ns, "addr", "add", netip.PrefixFrom(a, bits).String(), "dev", dev}
		if a.Is6() {
			s = append(s, "nodad")
		}
		return s
	}
	steps = append(steps,
		addr(tp.Host, HostUplinkIf, HostUplink4, 24), addr(tp.Host, HostUplinkIf, HostUplink6, 64),
		addr(tp.Inet, InetHostIf, InetHostSide4, 24), addr(tp.Inet, InetHostIf, InetHostSide6, 64),
		addr(tp.Inet, InetProvIf, InetProvSide4, 24), addr(tp.Inet, InetProvIf, InetProvSide6, 64),
		addr(tp.Prov, ProvUplinkIf, Endpoint4, 24), addr(tp.Prov, ProvUplinkIf, Endpoint6, 64),
		addr(tp.Host, HostLANIf, HostLAN4, 24), addr(tp.Host, HostLANIf, HostLAN6, 64),
		addr(tp.LAN, LANIf, LANHost4, 24), addr(tp.LAN, LANIf, LANHost6, 64),
		addr(tp.Inet, InetDecoyIf, DecoyTarget4, 32), addr(tp.Inet, InetDecoyIf, DecoyDNS4, 32),
		addr(tp.Inet, InetDecoyIf, DecoyTarget6, 128), addr(tp.Inet, InetDecoyIf, DecoyDNS6, 128),
	)
	for _, l := range [][2]string{
		{tp.Host, "lo"}, {tp.Host, HostUplinkIf}, {tp.Host, HostLANIf},
		{tp.Inet, "lo"}, {tp.Inet, InetHostIf}, {tp.Inet, InetProvIf},
		{tp.Prov, "lo"}, {tp.Prov, ProvUplinkIf},
		{tp.LAN, "lo"}, {tp.LAN, LANIf},
	} {
		steps = append(steps, []string{"-n", l[0], "link", "set", l[1], "up"})
	}
	steps = append(steps,
		[]string{"-n", tp.Host, "route", "add", "default", "via", InetHostSide4.String()},
		[]string{"-n", tp.Host, "-6", "route", "add", "default", "via", InetHostSide6.String()},
		[]string{"-n", tp.Prov, "route", "add", "default", "via", InetProvSide4.String()},
		[]string{"-n", tp.Prov, "-6", "route", "add", "default", "via", InetProvSide6.String()},
		[]string{"-n", tp.LAN, "route", "add", "default", "via", HostLAN4.String()},
		[]string{"-n", tp.LAN, "-6", "route", "add", "default", "via", HostLAN6.String()},
		// the LAN is reachable from the internet through the host (not
		// needed with masquerading, but keeps replies routable without it)
		[]string{"-n", tp.Inet, "route", "add", LANNet4.String(), "via", HostUplink4.String()},
		[]string{"-n", tp.Inet, "-6", "route", "add", "fd00:3::/64", "via", HostUplink6.String()},
	)
	for _, s := range steps {
		if out, err := runIP(s...); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
	}
	// The host masquerades what it forwards to its uplink, like a desktop
	// running containers: a confined namespace's escape via the host
	// would reach the internet with working replies.
	nat := fmt.Sprintf(`table inet vtopo {
	chain postrouting { type nat hook postrouting priority srcnat; oifname %q masquerade; }
}
`, HostUplinkIf)
	if err := tp.NFT(tp.Host, nat); err != nil {
		return err
	}
	return tp.waitLinks()
}

// waitLinks waits until every link answers ping over IPv4 and IPv6. A new
// veth is not IPv6-ready (solicited-node groups unjoined, so neighbour
// solicitations go unanswered) until linkwatch reports carrier, which the
// kernel rate-limits to about once a second.
func (tp *Topo) waitLinks() error {
	type hop struct {
		ns  string
		dst netip.Addr
	}
	hops := []hop{
		{tp.Host, InetHostSide4}, {tp.Host, InetHostSide6},
		{tp.Host, LANHost4}, {tp.Host, LANHost6},
		{tp.Inet, Endpoint4}, {tp.Inet, Endpoint6},
	}
	fns := make([]func() probe.Result, len(hops))
	for i, h := range hops {
		fns[i] = func() probe.Result {
			deadline := time.Now().Add(5 * time.Second)
			for {
				r := probe.Ping(h.ns, h.dst)
				if r.Reached() || time.Now().After(deadline) {
					return r
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	var bad []string
	for _, r := range probe.All(fns...) {
		if !r.Reached() {
			bad = append(bad, r.String())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("links not ready: %s", strings.Join(bad, "; "))
	}
	return nil
}

// NFT loads an nft script into namespace ns.
func (tp *Topo) NFT(ns, script string) error {
	f := filepath.Join(tp.Dir, fmt.Sprintf("nft-%s.nft", ns))
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		return err
	}
	if out, err := nsutil.Output(ns, "nft", "-f", f); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", ns, err, out)
	}
	return nil
}

// BlockWG drops the provider's WireGuard UDP (both directions) in the
// provider namespace, as a dead or filtered endpoint would.
func (tp *Topo) BlockWG(t testing.TB) {
	t.Helper()
	script := fmt.Sprintf(`table inet vtblock {
	chain input { type filter hook input priority -300; udp dport %d drop; }
	chain output { type filter hook output priority -300; udp sport %d drop; }
}
`, WGPort, WGPort)
	if err := tp.NFT(tp.Prov, script); err != nil {
		t.Fatal(err)
	}
}

// UnblockWG undoes BlockWG.
func (tp *Topo) UnblockWG(t testing.TB) {
	t.Helper()
	tp.Exec(t, tp.Prov, "nft", "delete", "table", "inet", "vtblock")
}

func (tp *Topo) newDecoy(bin string) (*Process, error) {
	cfg := &provider.Config{
		Log: filepath.Join(tp.Dir, "decoy.log"),
		Zone: map[string][]string{
			TargetName: {DecoyAnswer4.String(), DecoyAnswer6.String()},
		},
	}
	for _, p := range DecoyDNSPorts {
		cfg.DNS = append(cfg.DNS, fmt.Sprintf("[::]:%d", p))
	}
	for _, p := range DecoyTCPPorts {
		cfg.TCPEcho = append(cfg.TCPEcho, fmt.Sprintf("[::]:%d", p))
	}
	for _, p := range DecoyUDPPorts {
		cfg.UDPEcho = append(cfg.UDPEcho, fmt.Sprintf("[::]:%d", p))
	}
	return tp.process("decoy", tp.Inet, bin, cfg)
}

func (tp *Topo) newProvider(bin string) (*Process, error) {
	cfg := &provider.Config{
		Log: filepath.Join(tp.Dir, "provider.log"),
		WireGuard: &provider.WireGuard{
			Interface:  tp.ProviderIf,
			PrivateKey: tp.ProvKey.String(),
			ListenPort: WGPort,
			Addresses:  []string{ProvTunnel4.String() + "/24", ProvTunnel6.String() + "/64"},
			Peers: []provider.Peer{{
				PublicKey:  tp.ClientKey.PublicKey().String(),
				AllowedIPs: []string{ClientTunnel4.String() + "/32", ClientTunnel6.String() + "/128"},
			}},
			UAPI: true,
		},
		Zone: map[string][]string{
			TargetName: {ProvTunnel4.String(), ProvTunnel6.String()},
		},
	}
	for _, a := range []netip.Addr{ProvTunnel4, ProvTunnel6} {
		cfg.DNS = append(cfg.DNS, netip.AddrPortFrom(a, 53).String())
		cfg.TCPEcho = append(cfg.TCPEcho, netip.AddrPortFrom(a, EchoPort).String())
		cfg.UDPEcho = append(cfg.UDPEcho, netip.AddrPortFrom(a, EchoPort).String())
	}
	return tp.process("provider", tp.Prov, bin, cfg)
}

// ClientPeer returns a provider-binary WireGuard section for a hand-made
// client that uses ClientKey, so the harness can be validated without the
// agent: its TUN (name ifname) gets the client tunnel addresses and routes
// to the provider's tunnel subnets.
func (tp *Topo) ClientPeer(ifname string) *provider.WireGuard {
	return &provider.WireGuard{
		Interface:  ifname,
		PrivateKey: tp.ClientKey.String(),
		Addresses:  []string{ClientTunnel4.String() + "/32", ClientTunnel6.String() + "/128"},
		Routes:     []provider.Route{{Dst: "198.19.66.0/24"}, {Dst: "fd66::/64"}},
		Peers: []provider.Peer{{
			PublicKey:  tp.ProvKey.PublicKey().String(),
			Endpoint:   netip.AddrPortFrom(Endpoint4, WGPort).String(),
			AllowedIPs: []string{"0.0.0.0/0", "::/0"},
		}},
	}
}

// StartProcess writes cfg and starts a provider-binary instance named name
// in namespace ns, stopped at cleanup. cfg.Log defaults to Dir/<name>.log.
func (tp *Topo) StartProcess(t testing.TB, name, ns, bin string, cfg *provider.Config) *Process {
	t.Helper()
	p := tp.NewProcess(t, name, ns, bin, cfg)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// NewProcess writes cfg and returns a provider-binary instance named name
// in namespace ns, not started (Start it when ns exists), stopped at t's
// cleanup. cfg.Log defaults to Dir/<name>.log.
func (tp *Topo) NewProcess(t testing.TB, name, ns, bin string, cfg *provider.Config) *Process {
	t.Helper()
	if cfg.Log == "" {
		cfg.Log = filepath.Join(tp.Dir, name+".log")
	}
	p, err := tp.process(name, ns, bin, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	return p
}

func (tp *Topo) process(name, ns, bin string, cfg *provider.Config) (*Process, error) {
	path := filepath.Join(tp.Dir, name+".json")
	if err := provider.WriteConfig(path, cfg); err != nil {
		return nil, err
	}
	return &Process{Name: name, NS: ns, Bin: bin, Config: path, Log: cfg.Log}, nil
}

// destroy stops the processes and removes every resource named after the
// topology's ID: its namespaces (and any the agent left), links the agent
// may have left in the root namespace, resolver/runtime files, sockets.
func (tp *Topo) destroy() error {
	for _, p := range []*Process{tp.Provider, tp.Decoy} {
		if p != nil {
			p.Kill()
		}
	}
	var errs []string
	entries, _ := os.ReadDir(nsutil.Dir)
	for _, e := range entries {
		if idOf(e.Name()) == tp.ID {
			if err := deleteNetns(e.Name()); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	for _, l := range links() {
		if idOf(l) == tp.ID {
			if out, err := runIP("link", "del", l); err != nil {
				errs = append(errs, fmt.Sprintf("%v: %s", err, out))
			}
		}
	}
	for _, dir := range []string{"/etc/netns", "/run/vpn-confinement", "/run/wireguard"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if idOf(e.Name()) == tp.ID {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
	releaseID(tp.ID)
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func runIP(args ...string) ([]byte, error) {
	out, err := execCommand("ip", args...)
	if err != nil {
		return out, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

func execCommand(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
