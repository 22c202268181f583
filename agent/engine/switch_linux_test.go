package engine

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// switchWorld extends the fake world with the device, resolv.conf and the
// kill switch's content: which server's DNS set is loaded.
type switchWorld struct {
	*world
	dns      string // the loaded kill switch's dns4 set
	fwd      string // its forwarded-port sets ("none" when empty or absent)
	device   string // the DNS of the server whose peers the device has (its "identity" here)
	resolv   string // resolv.conf's servers
	resolved map[string]string
	devCfg   *wgtypes.Config
	pinned   []netip.AddrPort // what the pin table allows, if loaded
}

func dnsOf(s *config.Spec) string {
	var out []string
	for _, d := range s.DNS {
		out = append(out, d.String())
	}
	return strings.Join(out, ",")
}

type recFirewall struct {
	fakeFirewall
	sw *switchWorld
}

func (f recFirewall) Apply(r *policy.Ruleset, nsPath string) error {
	if err := f.fakeFirewall.Apply(r, nsPath); err != nil {
		return err
	}
	var fwd policy.Forwarded
	for _, s := range r.Sets {
		switch s.Name {
		case policy.SetForwardedTCP:
			fwd.TCP = s.Ports
		case policy.SetForwardedUDP:
			fwd.UDP = s.Ports
		}
		if s.Name == policy.SetPin4 {
			f.sw.pinned = nil
			for _, a := range s.Addrs {
				f.sw.pinned = append(f.sw.pinned, netip.AddrPortFrom(a.Addr(), 51820))
			}
		}
		if s.Name == "dns4" {
			var a []string
			for _, p := range s.Addrs {
				a = append(a, p.Addr().String())
			}
			f.sw.dns = strings.Join(a, ",")
		}
	}
	if r.Set(policy.SetPin4) == nil {
		f.sw.fwd = fwd.String()
	}
	return nil
}

func (f recFirewall) SetPinned(table string, eps []netip.AddrPort) error {
	if err := f.fakeFirewall.SetPinned(table, eps); err != nil {
		return err
	}
	f.sw.pinned = eps
	return nil
}

func (f recFirewall) SetForwarded(nsPath, table string, fwd policy.Forwarded) error {
	if err := f.fakeFirewall.SetForwarded(nsPath, table, fwd); err != nil {
		return err
	}
	f.sw.fwd = fwd.String()
	return nil
}

type fakeDevices struct{ sw *switchWorld }

func (f fakeDevices) Config(_ context.Context, s *config.Spec) (wgtypes.Config, error) {
	if err := f.sw.call("dev.resolve " + dnsOf(s)); err != nil {
		return wgtypes.Config{}, err
	}
	key := s.PrivateKey
	ep := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(f.sw.resolved[s.Peers[0].Endpoint]))
	return wgtypes.Config{PrivateKey: &key, ReplacePeers: true, Peers: []wgtypes.PeerConfig{{PublicKey: s.Peers[0].PublicKey, Endpoint: ep}}}, nil
}
func (f fakeDevices) Configure(_ wireguard.Tunnel, _ string, cfg wgtypes.Config) error {
	if err := f.sw.call("dev.configure"); err != nil {
		return err
	}
	if !f.sw.tables[killSwitch("torrent")] {
		f.sw.violate("device configured without the kill switch")
	}
	if f.sw.tables[" "+names.PinTable("torrent")] {
		for _, p := range cfg.Peers {
			if p.Endpoint != nil && !slices.Contains(f.sw.pinned, p.Endpoint.AddrPort()) {
				f.sw.violate("device given endpoint %s while the pin allows only %v", p.Endpoint, f.sw.pinned)
			}
		}
	}
	f.sw.devCfg = &cfg
	return nil
}
func (f fakeDevices) Read(string, string) (*wireguard.Device, error) {
	c := f.sw.devCfg
	d := &wireguard.Device{PublicKey: c.PrivateKey.PublicKey()}
	for _, p := range c.Peers {
		d.Peers = append(d.Peers, wgtypes.Peer{PublicKey: p.PublicKey, Endpoint: p.Endpoint})
	}
	return d, nil
}

type fakeResolv struct{ sw *switchWorld }

func (f fakeResolv) Rewrite(s *config.Spec) error {
	if err := f.sw.call("resolv.rewrite " + dnsOf(s)); err != nil {
		return err
	}
	if f.sw.dns != dnsOf(s) {
		f.sw.violate("resolv.conf names %s while the kill switch allows %s", dnsOf(s), f.sw.dns)
	}
	f.sw.resolv = dnsOf(s)
	return nil
}

// pool is two servers differing in keys, addresses, DNS and endpoint.
func pool() []*config.Spec {
	a, b := testSpec(true), testSpec(true)
	ka, _ := wgtypes.GeneratePrivateKey()
	kb, _ := wgtypes.GeneratePrivateKey()
	pa, _ := wgtypes.GeneratePrivateKey()
	pb, _ := wgtypes.GeneratePrivateKey()
	a.PrivateKey, b.PrivateKey = ka, kb
	a.Peers[0].PublicKey, b.Peers[0].PublicKey = pa.PublicKey(), pb.PublicKey()
	b.Peers[0].Endpoint = "vpn-b.test:51820"
	b.Addresses = []netip.Prefix{pfx("10.3.0.2/32")}
	b.DNS = []netip.Addr{netip.MustParseAddr("10.3.0.1")}
	b.Server = 1
	p := []*config.Spec{a, b}
	a.Pool, b.Pool = p, p
	return p
}

func upSwitchFake(t *testing.T) (*switchWorld, *Engine, *Instance, []*config.Spec) {
	t.Helper()
	return upSwitchFakeWith(t, pool())
}

func upSwitchFakeWith(t *testing.T, p []*config.Spec) (*switchWorld, *Engine, *Instance, []*config.Spec) {
	t.Helper()
	w := newWorld()
	sw := &switchWorld{world: w, resolved: map[string]string{"198.51.100.1:51820": "198.51.100.1:51820", "vpn-b.test:51820": "203.0.113.5:51820"}}
	e := w.engine()
	e.system.fw = recFirewall{fakeFirewall{w}, sw}
	e.system.dev = fakeDevices{sw}
	e.system.resolv = fakeResolv{sw}
	inst, err := e.Up(context.Background(), p[0], "")
	if err != nil {
		t.Fatal(err)
	}
	// The fake Ensure does not configure a device: do what Up's would.
	cfg, _ := fakeDevices{sw}.Config(context.Background(), p[0])
	sw.devCfg = &cfg
	sw.resolv, sw.dns = dnsOf(p[0]), dnsOf(p[0]) // Up created the table (Create, not recorded)
	w.calls = nil
	return sw, e, inst, p
}

func TestSwitchServer(t *testing.T) {
	sw, e, inst, p := upSwitchFake(t)
	if err := e.Switch(context.Background(), inst, p[1]); err != nil {
		t.Fatal(err)
	}
	ks := killSwitch("torrent")
	want := []string{"dev.resolve 10.3.0.1", "dev.resolve 10.2.0.1", "fw.apply " + ks, "dev.configure", "links.configure " + p[1].Interface, "resolv.rewrite 10.3.0.1", "files.state torrent"}
	if got := strings.Join(sw.calls, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if len(sw.violations) > 0 {
		t.Fatalf("violations: %v", sw.violations)
	}
	if sw.dns != "10.3.0.1" || sw.resolv != "10.3.0.1" {
		t.Fatalf("after the switch the kill switch allows %s and resolv.conf names %s, want the second server's 10.3.0.1", sw.dns, sw.resolv)
	}
	if sw.devCfg.PrivateKey.PublicKey() != p[1].PrivateKey.PublicKey() || sw.devCfg.Peers[0].PublicKey != p[1].Peers[0].PublicKey {
		t.Fatal("the device did not get the second server's key and peer")
	}
	if inst.Spec != p[1] {
		t.Fatal("the instance's active server did not change")
	}
	a := inst.ActiveServer()
	if a.Index != 1 || a.Endpoint != "vpn-b.test:51820" || a.Resolved != "203.0.113.5:51820" {
		t.Fatalf("active server %+v", a)
	}
	if inst.state.Server != 1 || inst.state.Endpoint != "vpn-b.test:51820" || strings.Join(inst.state.DNS, ",") != "10.3.0.1" {
		t.Fatalf("state %+v", inst.state)
	}
	if slicesHasPrefix(sw.calls, "fw.remove") {
		t.Fatal("a table was removed during the switch")
	}
}

func slicesHasPrefix(calls []string, p string) bool {
	for _, c := range calls {
		if strings.HasPrefix(c, p) {
			return true
		}
	}
	return false
}

// switchOp is the fake world's name of a switch step to next (the
// second server, DNS 10.3.0.1), for an injected failure.
func switchOp(step string, next *config.Spec) string {
	switch step {
	case "fw.apply":
		return step + " " + killSwitch("torrent")
	case "links.configure":
		return step + " " + next.Interface
	case "resolv.rewrite":
		return step + " " + dnsOf(next)
	case "files.state":
		return step + " torrent"
	}
	return step
}

// A switch that fails at any step puts the previous server back, kill
// switch included, and never removes the kill switch.
func TestSwitchRollback(t *testing.T) {
	for _, step := range []string{"fw.apply", "dev.configure", "links.configure", "resolv.rewrite", "files.state"} {
		t.Run(step, func(t *testing.T) {
			sw, e, inst, p := upSwitchFake(t)
			op := switchOp(step, p[1])
			// A failed step registers no undo, so the failure stays
			// injected through the rollback.
			sw.fail[op] = errors.New("injected")
			err := e.Switch(context.Background(), inst, p[1])
			if err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("err %v", err)
			}
			if inst.Spec != p[0] {
				t.Fatal("the active server changed although the switch failed")
			}
			if sw.dns != "10.2.0.1" || sw.resolv != "10.2.0.1" {
				t.Fatalf("after the rollback the kill switch allows %q and resolv.conf names %q, want the first server's", sw.dns, sw.resolv)
			}
			if sw.devCfg.PrivateKey.PublicKey() != p[0].PrivateKey.PublicKey() {
				t.Fatal("the device was not put back to the first server")
			}
			if !sw.tables[killSwitch("torrent")] || slicesHasPrefix(sw.calls, "fw.remove") || len(sw.violations) > 0 {
				t.Fatalf("kill switch: present %v, calls %v, violations %v", sw.tables[killSwitch("torrent")], sw.calls, sw.violations)
			}
		})
	}
}

// A name that does not resolve changes nothing.
func TestSwitchUnresolvable(t *testing.T) {
	sw, e, inst, p := upSwitchFake(t)
	sw.fail["dev.resolve 10.3.0.1"] = errors.New("no such host")
	if err := e.Switch(context.Background(), inst, p[1]); err == nil {
		t.Fatal("switched to a server whose endpoint does not resolve")
	}
	if len(sw.calls) != 1 || inst.Spec != p[0] {
		t.Fatalf("calls %v", sw.calls)
	}
}

func TestRepairDrift(t *testing.T) {
	sw, e, inst, _ := upSwitchFake(t)
	repairDrift := func() ([]string, error) {
		d, err := e.Device(inst)
		if err != nil {
			return nil, err
		}
		return e.RepairDrift(context.Background(), inst, d)
	}
	if d, err := repairDrift(); err != nil || len(d) != 0 {
		t.Fatalf("no drift expected: %v %v", d, err)
	}
	if slicesHasPrefix(sw.calls, "dev.configure") {
		t.Fatal("reconfigured a device that had not drifted")
	}
	// Someone points the peer elsewhere.
	moved := *sw.devCfg
	moved.Peers = []wgtypes.PeerConfig{moved.Peers[0]}
	moved.Peers[0].Endpoint = &net.UDPAddr{IP: net.IPv4(192, 0, 2, 66), Port: 1}
	sw.devCfg = &moved
	d, err := repairDrift()
	if err != nil || len(d) != 1 || !strings.Contains(d[0], "192.0.2.66:1") {
		t.Fatalf("drift %v %v", d, err)
	}
	if got := sw.devCfg.Peers[0].Endpoint.String(); got != "198.51.100.1:51820" {
		t.Fatalf("endpoint after the repair %s", got)
	}
}

func TestRewriteInPlace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(p, []byte("nameserver 10.2.0.1\nnameserver 10.2.0.9\noptions timeout:2 attempts:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := inode(t, p)
	// An open descriptor stands in for a bind mount: it pins the inode.
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := rewriteInPlace(p, []byte("nameserver 10.3.0.1\n")); err != nil {
		t.Fatal(err)
	}
	if inode(t, p) != before {
		t.Fatal("the rewrite replaced the inode")
	}
	b := make([]byte, 100)
	n, _ := f.ReadAt(b, 0)
	if got := string(b[:n]); got != "nameserver 10.3.0.1\n" {
		t.Fatalf("through the old descriptor: %q", got)
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A switch does not touch a tunnel whose data plane has stopped (a
// userspace device closes when someone deletes its link; the e2e leak
// matrix saw "IPC error -22: failed to create new peer: device closed"):
// it fails before it changes anything, the kill switch included, and
// says why. The repair rebuilds the tunnel first.
func TestSwitchDataPlaneStopped(t *testing.T) {
	sw, e, inst, p := upSwitchFake(t)
	close(inst.Tunnel.(*fakeTunnel).done)
	err := e.Switch(context.Background(), inst, p[1])
	if !errors.Is(err, ErrDataPlaneStopped) {
		t.Fatalf("switch on a stopped data plane: err %v, want ErrDataPlaneStopped", err)
	}
	if len(sw.calls) != 0 || inst.Spec != p[0] {
		t.Fatalf("the switch changed something: calls %v, active server %d", sw.calls, inst.Spec.Server)
	}
	// The control: a live tunnel switches.
	inst.Tunnel = &fakeTunnel{w: sw.world, ns: "torrent", name: p[0].Interface, done: make(chan struct{})}
	if err := e.Switch(context.Background(), inst, p[1]); err != nil || inst.Spec != p[1] {
		t.Fatalf("switch on a live tunnel: %v", err)
	}
}

// closingDevices is a device whose link is deleted as it is configured:
// it closes (its tunnel's Done) and the configuration fails.
type closingDevices struct {
	fakeDevices
	t *fakeTunnel
}

func (f closingDevices) Configure(t wireguard.Tunnel, ns string, cfg wgtypes.Config) error {
	close(f.t.done)
	f.sw.call("dev.configure")
	return errors.New("IPC error -22: failed to create new peer: device closed")
}

// The link deleted during a switch: the switch is rolled back as any
// failed one (the previous server's kill switch back), and its error
// says the data plane stopped, which is the tunnel's failure, not the
// server's. The control: another failure of the device does not say so.
func TestSwitchDataPlaneStoppedDuring(t *testing.T) {
	sw, e, inst, p := upSwitchFake(t)
	sw.fail["dev.configure"] = errors.New("injected")
	if err := e.Switch(context.Background(), inst, p[1]); err == nil || errors.Is(err, ErrDataPlaneStopped) {
		t.Fatalf("a device failure on a live tunnel: err %v, want an error that is not ErrDataPlaneStopped", err)
	}
	delete(sw.fail, "dev.configure")
	e.system.dev = closingDevices{fakeDevices{sw}, inst.Tunnel.(*fakeTunnel)}
	err := e.Switch(context.Background(), inst, p[1])
	if !errors.Is(err, ErrDataPlaneStopped) || !strings.Contains(err.Error(), "device closed") {
		t.Fatalf("the device closed during the switch: err %v, want ErrDataPlaneStopped with the device's error", err)
	}
	if inst.Spec != p[0] || sw.dns != dnsOf(p[0]) || !sw.tables[killSwitch("torrent")] || len(sw.violations) > 0 {
		t.Fatalf("not rolled back: server %d, kill switch %v allowing %s, violations %v", inst.Spec.Server, sw.tables[killSwitch("torrent")], sw.dns, sw.violations)
	}
}
