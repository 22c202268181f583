package engine

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// peerDevices is a device that applies configurations as WireGuard does:
// peers replaced, removed, updated; a prefix given to one peer is taken
// from any other. It checks at every configuration that the kill switch
// is loaded and that no prefix is routed to two peers.
type peerDevices struct {
	fakeDevices
	key   wgtypes.Key
	peers []wgtypes.Peer
}

func (f *peerDevices) Configure(_ wireguard.Tunnel, _ string, cfg wgtypes.Config) error {
	if err := f.sw.call("dev.configure"); err != nil {
		return err
	}
	if !f.sw.tables[killSwitch("torrent")] {
		f.sw.violate("device configured without the kill switch")
	}
	if cfg.PrivateKey != nil {
		f.key = *cfg.PrivateKey
	}
	if cfg.ReplacePeers {
		f.peers = nil
	}
	for _, pc := range cfg.Peers {
		i := slices.IndexFunc(f.peers, func(p wgtypes.Peer) bool { return p.PublicKey == pc.PublicKey })
		if pc.Remove {
			if i >= 0 {
				f.peers = slices.Delete(f.peers, i, i+1)
			}
			continue
		}
		if i < 0 {
			if pc.UpdateOnly {
				continue
			}
			f.peers = append(f.peers, wgtypes.Peer{PublicKey: pc.PublicKey})
			i = len(f.peers) - 1
		}
		p := &f.peers[i]
		if pc.Endpoint != nil {
			p.Endpoint = pc.Endpoint
		}
		if pc.PersistentKeepaliveInterval != nil {
			p.PersistentKeepaliveInterval = *pc.PersistentKeepaliveInterval
		}
		if pc.ReplaceAllowedIPs {
			p.AllowedIPs = nil
		}
		for _, a := range pc.AllowedIPs {
			for j := range f.peers {
				f.peers[j].AllowedIPs = slices.DeleteFunc(f.peers[j].AllowedIPs, func(n net.IPNet) bool { return n.String() == a.String() })
			}
			p.AllowedIPs = append(p.AllowedIPs, a)
		}
	}
	seen := map[string]bool{}
	for _, p := range f.peers {
		for _, a := range p.AllowedIPs {
			if seen[a.String()] {
				f.sw.violate("%s routed to two peers", a.String())
			}
			seen[a.String()] = true
		}
	}
	return nil
}

func (f *peerDevices) Read(string, string) (*wireguard.Device, error) {
	return &wireguard.Device{PublicKey: f.key.PublicKey(), Peers: slices.Clone(f.peers)}, nil
}

// routedTo is the peer that carries 0.0.0.0/0, and the peers on the device.
func (f *peerDevices) routedTo() (wgtypes.Key, int) {
	for _, p := range f.peers {
		for _, a := range p.AllowedIPs {
			if a.String() == "0.0.0.0/0" {
				return p.PublicKey, len(f.peers)
			}
		}
	}
	return wgtypes.Key{}, len(f.peers)
}

func (f *peerDevices) peer(k wgtypes.Key) *wgtypes.Peer {
	i := slices.IndexFunc(f.peers, func(p wgtypes.Peer) bool { return p.PublicKey == k })
	if i < 0 {
		return nil
	}
	return &f.peers[i]
}

// sharedPool is three servers sharing the client's key and address
// (a Mullvad-style pool), each with its own server key, endpoint and DNS.
func sharedPool() []*config.Spec {
	key, _ := wgtypes.GeneratePrivateKey()
	var p []*config.Spec
	for i := range 3 {
		s := testSpec(true)
		s.PrivateKey = key
		pk, _ := wgtypes.GeneratePrivateKey()
		s.Peers[0].PublicKey = pk.PublicKey()
		s.Peers[0].Keepalive = 0
		s.Server = i
		if i > 0 {
			s.Peers[0].Endpoint = []string{"", "vpn-b.test:51820", "vpn-c.test:51820"}[i]
			s.DNS = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(2 + i), 0, 1})}
		}
		p = append(p, s)
	}
	for _, s := range p {
		s.Pool = p
	}
	return p
}

func upStandbyFake(t *testing.T) (*switchWorld, *peerDevices, *Engine, *Instance, []*config.Spec) {
	t.Helper()
	sw, e, inst, p := upSwitchFakeWith(t, sharedPool())
	sw.resolved["vpn-c.test:51820"] = "203.0.113.9:51820"
	dev := &peerDevices{fakeDevices: fakeDevices{sw}}
	cfg, _ := fakeDevices{sw}.Config(context.Background(), p[0])
	cfg.Peers[0].AllowedIPs = []net.IPNet{{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}
	dev.Configure(nil, "", cfg)
	e.system.dev = dev
	inst.applied = &cfg
	sw.calls = nil
	return sw, dev, e, inst, p
}

func TestSetStandby(t *testing.T) {
	sw, dev, e, inst, p := upStandbyFake(t)
	if err := e.SetStandby(context.Background(), inst, p[1]); err != nil {
		t.Fatal(err)
	}
	if to, n := dev.routedTo(); to != p[0].Peers[0].PublicKey || n != 2 {
		t.Fatalf("after SetStandby: %d peers, routes to the active server's peer: %v", n, to == p[0].Peers[0].PublicKey)
	}
	sb := dev.peer(p[1].Peers[0].PublicKey)
	if sb == nil || len(sb.AllowedIPs) != 0 || sb.PersistentKeepaliveInterval != StandbyKeepalive || sb.Endpoint.String() != "203.0.113.5:51820" {
		t.Fatalf("standby peer %+v, want no allowed IPs, keepalive %v, its endpoint", sb, StandbyKeepalive)
	}
	if slicesHasPrefix(sw.calls, "fw.") || len(sw.violations) > 0 {
		t.Fatalf("calls %v, violations %v: a standby changes nothing but the device", sw.calls, sw.violations)
	}
	if s, armed := inst.Standby(); s != p[1] || armed.IsZero() {
		t.Fatalf("standby %v armed %v", s, armed)
	}
	if srv, ok := inst.StandbyServer(); !ok || srv.Index != 1 || srv.Resolved != "203.0.113.5:51820" {
		t.Fatalf("StandbyServer %+v %v", srv, ok)
	}
	// The drift check wants the standby's peer: no drift, nothing re-applied.
	d, _ := dev.Read("", "")
	if drift, err := e.RepairDrift(context.Background(), inst, d); err != nil || len(drift) != 0 {
		t.Fatalf("drift %v %v with the standby on the device", drift, err)
	}
	// Replacing the standby removes the old peer.
	if err := e.SetStandby(context.Background(), inst, p[2]); err != nil {
		t.Fatal(err)
	}
	if dev.peer(p[1].Peers[0].PublicKey) != nil || dev.peer(p[2].Peers[0].PublicKey) == nil {
		t.Fatal("the old standby's peer stayed, or the new one is missing")
	}
	// nil removes it.
	if err := e.SetStandby(context.Background(), inst, nil); err != nil {
		t.Fatal(err)
	}
	if _, n := dev.routedTo(); n != 1 {
		t.Fatalf("%d peers after removing the standby", n)
	}
}

// Servers with their own client keys or addresses cannot share a device:
// no standby, nothing changed, and the error says why.
func TestSetStandbyRefusesIncompatible(t *testing.T) {
	for _, tc := range []struct {
		edit func(p []*config.Spec) *config.Spec
		want string
	}{
		{func(p []*config.Spec) *config.Spec {
			s := *p[1]
			s.PrivateKey, _ = wgtypes.GeneratePrivateKey()
			return &s
		}, "private key"},
		{func(p []*config.Spec) *config.Spec {
			s := *p[2]
			s.Addresses = []netip.Prefix{pfx("10.3.0.2/32")}
			return &s
		}, "addresses"},
		{func(p []*config.Spec) *config.Spec { s := *p[1]; s.Peers = []config.PeerSpec{p[0].Peers[0]}; return &s }, "server key"},
		{func(p []*config.Spec) *config.Spec { return p[0] }, "active server"},
	} {
		sw, dev, e, inst, p := upStandbyFake(t)
		s := tc.edit(p)
		if s != p[0] && StandbyCompatible(p[0], p[s.Server]) != nil {
			t.Fatal("the control: the unedited server is refused")
		}
		err := e.SetStandby(context.Background(), inst, s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("standby %s: err %v, want one naming %q", tc.want, err, tc.want)
		}
		if _, n := dev.routedTo(); n != 1 || slicesHasPrefix(sw.calls, "dev.configure") {
			t.Errorf("refused standby %s changed the device: %d peers, calls %v", tc.want, n, sw.calls)
		}
	}
}

// A warm switch: the kill switch first (atomic replace), then one device
// change moving the routes to the standby's peer, without resolving or
// replacing any peer; the server left becomes the standby.
func TestWarmSwitch(t *testing.T) {
	sw, dev, e, inst, p := upStandbyFake(t)
	if err := e.SetStandby(context.Background(), inst, p[1]); err != nil {
		t.Fatal(err)
	}
	sw.calls = nil
	if err := e.Switch(context.Background(), inst, p[1]); err != nil {
		t.Fatal(err)
	}
	ks := killSwitch("torrent")
	want := []string{"fw.apply " + ks, "dev.configure", "links.configure " + p[1].Interface, "resolv.rewrite 10.3.0.1", "files.state torrent"}
	if got := strings.Join(sw.calls, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if len(sw.violations) > 0 {
		t.Fatalf("violations: %v", sw.violations)
	}
	if to, n := dev.routedTo(); to != p[1].Peers[0].PublicKey || n != 2 {
		t.Fatalf("after the warm switch: %d peers, routes to the standby: %v", n, to == p[1].Peers[0].PublicKey)
	}
	if sw.dns != "10.3.0.1" || sw.resolv != "10.3.0.1" || inst.Spec != p[1] {
		t.Fatalf("kill switch %s, resolv %s, active %d", sw.dns, sw.resolv, inst.Spec.Server)
	}
	left := dev.peer(p[0].Peers[0].PublicKey)
	if left == nil || len(left.AllowedIPs) != 0 || left.PersistentKeepaliveInterval != StandbyKeepalive {
		t.Fatalf("the server left: %+v, want a standby peer", left)
	}
	if s, armed := inst.Standby(); s != p[0] || !armed.IsZero() {
		t.Fatalf("standby after the switch %v (armed %v), want the server left, not re-armed", s, armed)
	}
	if a := inst.ActiveServer(); a.Resolved != "203.0.113.5:51820" {
		t.Fatalf("active %+v", a)
	}
	d, _ := dev.Read("", "")
	if drift, err := e.RepairDrift(context.Background(), inst, d); err != nil || len(drift) != 0 {
		t.Fatalf("drift %v %v after the warm switch", drift, err)
	}
	// A switch to a server that is not the standby is cold: peers
	// replaced, the standby gone with them.
	if err := e.Switch(context.Background(), inst, p[2]); err != nil {
		t.Fatal(err)
	}
	if _, n := dev.routedTo(); n != 1 || dev.peer(p[2].Peers[0].PublicKey) == nil {
		t.Fatalf("after a cold switch: %d peers", n)
	}
	if s, _ := inst.Standby(); s != nil {
		t.Fatal("a standby is recorded after a cold switch replaced the peers")
	}
}

// A warm switch that fails at any step puts the previous server back:
// the routes on its peer, the standby's peer a standby again, its kill
// switch loaded; the kill switch is never removed.
func TestWarmSwitchRollback(t *testing.T) {
	for _, step := range []string{"fw.apply", "dev.configure", "links.configure", "resolv.rewrite", "files.state"} {
		t.Run(step, func(t *testing.T) {
			sw, dev, e, inst, p := upStandbyFake(t)
			if err := e.SetStandby(context.Background(), inst, p[1]); err != nil {
				t.Fatal(err)
			}
			op := switchOp(step, p[1])
			sw.fail[op] = errors.New("injected")
			if err := e.Switch(context.Background(), inst, p[1]); err == nil {
				t.Fatal("no error")
			}
			delete(sw.fail, op)
			if to, n := dev.routedTo(); to != p[0].Peers[0].PublicKey || n != 2 {
				t.Fatalf("after the rollback: %d peers, routes to the first server: %v", n, to == p[0].Peers[0].PublicKey)
			}
			if s, _ := inst.Standby(); s != p[1] || inst.Spec != p[0] {
				t.Fatalf("after the rollback the standby is %v and the active server %d", s, inst.Spec.Server)
			}
			if sw.dns != "10.2.0.1" || !sw.tables[killSwitch("torrent")] || slicesHasPrefix(sw.calls, "fw.remove") || len(sw.violations) > 0 {
				t.Fatalf("kill switch %s present %v, calls %v, violations %v", sw.dns, sw.tables[killSwitch("torrent")], sw.calls, sw.violations)
			}
			// And the standby still works.
			if err := e.Switch(context.Background(), inst, p[1]); err != nil {
				t.Fatal(err)
			}
			if to, _ := dev.routedTo(); to != p[1].Peers[0].PublicKey {
				t.Fatal("the retried warm switch did not move the routes")
			}
		})
	}
}
