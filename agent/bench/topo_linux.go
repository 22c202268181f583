package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// topo is the bench's private network: an underlay namespace standing in
// for the host (the agent's data plane opens its UDP socket there), a
// provider namespace (WireGuard peer, iperf3 server, request/response
// server) joined to it by a veth, and the confined namespace that
// engine.Up builds. Nothing is created in the namespace the bench was
// started in except files under /run and /etc/netns that the agent
// itself uses.
type topo struct {
	ID           string // "vb" + 6 hex digits
	U, P, C      string // namespace names: underlay, provider, confined
	C2           string // the unbounded agent's confined namespace (ModeUnbounded)
	S            string // the sidecar agent's pod namespace (ModeSidecar)
	VethU, VethP string
	VethS, VethQ string // the pod's veth to the provider: pod end, provider end
	PeerIf       string // provider's WireGuard interface
	RefIf        string // reference tunnel interface (stock wireguard-go)
	SysRefIf     string // system reference tunnel interface
	Dir          string // keys and logs, mode 0700

	PeerKey, AgentKey, RefKey, UnbKey, SysRefKey, SideKey wgtypes.Key

	under, prov, conf *testbed.Thread
	conf2             *testbed.Thread // in C2, when ModeUnbounded runs
	pod               *testbed.Thread // in S, when ModeSidecar runs
	log               *slog.Logger
	undo              []func() error
}

// newTopo names a topology and makes its private directory; nothing else
// exists yet.
func newTopo(log *slog.Logger) (*topo, error) {
	id, err := testbed.NewID("vb")
	if err != nil {
		return nil, err
	}
	t := &topo{ID: id, U: id + "u", P: id + "p", C: id + "c", C2: id + "d", S: id + "s", VethU: id + "a", VethP: id + "b",
		VethS: id + "e", VethQ: id + "f",
		PeerIf: id + "w", RefIf: id + "r", SysRefIf: id + "q", log: log}
	t.onClose(func() error { return testbed.ReleaseID(id) })
	dir, err := os.MkdirTemp("", "vpn-bench-"+id+"-")
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	t.Dir = dir
	t.onClose(func() error { return os.RemoveAll(dir) })
	for _, k := range []*wgtypes.Key{&t.PeerKey, &t.AgentKey, &t.RefKey, &t.UnbKey, &t.SysRefKey, &t.SideKey} {
		if *k, err = wgtypes.GeneratePrivateKey(); err != nil {
			t.Close()
			return nil, fmt.Errorf("generate key: %w", err)
		}
	}
	return t, nil
}

// onClose registers an undo; Close runs them in reverse.
func (t *topo) onClose(fn func() error) { t.undo = append(t.undo, fn) }

// Close removes everything the topology created, in reverse order, and
// keeps going past failures.
func (t *topo) Close() error {
	var errs []error
	for i := len(t.undo) - 1; i >= 0; i-- {
		if err := t.undo[i](); err != nil {
			t.log.Warn("bench cleanup step failed", "err", err)
			errs = append(errs, err)
		}
	}
	t.undo = nil
	return errors.Join(errs...)
}

// buildUnderlay creates the underlay and provider namespaces, their
// threads and the veth between them.
func (t *topo) buildUnderlay() error {
	for _, ns := range []string{t.U, t.P} {
		if err := netns.Create(ns); err != nil {
			return fmt.Errorf("bench topology: %w", err)
		}
		t.onClose(func() error { return netns.Delete(ns) })
	}
	var err error
	if t.under, err = testbed.StartThread(t.U); err != nil {
		return err
	}
	t.onClose(func() error { t.under.Close(); return nil })
	if t.prov, err = testbed.StartThread(t.P); err != nil {
		return err
	}
	t.onClose(func() error { t.prov.Close(); return nil })
	return testbed.AddVeth(t.vethEnd(t.U, t.VethU, underlayAgent), t.vethEnd(t.P, t.VethP, underlayPeer))
}

// buildPod creates the sidecar's pod namespace, its veth to the provider
// (eth0 of a pod, the node's role played by the provider namespace) and
// its default route: the pod as an orchestrator hands it to the agent.
func (t *topo) buildPod() error {
	if err := netns.Create(t.S); err != nil {
		return fmt.Errorf("bench topology: %w", err)
	}
	t.onClose(func() error { return netns.Delete(t.S) })
	if err := testbed.AddVeth(t.vethEnd(t.S, t.VethS, podAddr), t.vethEnd(t.P, t.VethQ, podPeer)); err != nil {
		return err
	}
	return testbed.AddRoute(t.S, netip.Prefix{}, netip.MustParseAddr(podPeer))
}

// podRoutesThroughTunnel checks that the pod's app reaches dst through
// the sidecar agent's tunnel, not by the pod's veth (the provider owns
// dst, so a packet by the veth would reach it too, in cleartext, and the
// sidecar mode would measure no tunnel at all).
func (t *topo) podRoutesThroughTunnel(dst string) error {
	h, err := netns.Handle(t.S)
	if err != nil {
		return err
	}
	defer h.Close()
	veth, err := h.LinkByName(t.VethS)
	if err != nil {
		return fmt.Errorf("sidecar pod: %w", err)
	}
	rs, err := h.RouteGet(net.ParseIP(dst))
	if err != nil || len(rs) == 0 {
		return fmt.Errorf("sidecar pod: route to %s: %v", dst, err)
	}
	if rs[0].LinkIndex == veth.Attrs().Index {
		return fmt.Errorf("sidecar pod: %s is routed by the pod's veth %s, not through the agent's tunnel", dst, t.VethS)
	}
	return nil
}

// vethEnd is one end of the underlay veth: IPv6 off (no DAD or router
// solicitations in the measurements), one IPv4 address.
func (t *topo) vethEnd(ns, name, addr string) testbed.End {
	p := netip.PrefixFrom(netip.MustParseAddr(addr), underlayBits)
	return testbed.End{NS: ns, Name: name, Addrs: []netip.Prefix{p}, NoIPv6: true}
}

// writeKey stores a private key (base64) in the work dir, mode 0600.
func (t *topo) writeKey(name string, k wgtypes.Key) (string, error) {
	p := filepath.Join(t.Dir, name)
	if err := os.WriteFile(p, []byte(k.String()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write key: %w", err)
	}
	return p, nil
}

// thread returns the namespace thread a mode's client runs on.
func (t *topo) thread(m Mode) *testbed.Thread {
	switch m {
	case ModeDirect:
		return t.under
	case ModeUnbounded:
		return t.conf2
	case ModeSidecar:
		return t.pod
	}
	return t.conf
}

// nsOf names the namespace a mode's client runs in.
func (t *topo) nsOf(m Mode) string {
	switch m {
	case ModeDirect:
		return t.U
	case ModeUnbounded:
		return t.C2
	case ModeSidecar:
		return t.S
	}
	return t.C
}

// waitPing pings addr from th until a reply arrives (the WireGuard
// handshake is done) or ctx ends.
func waitPing(ctx context.Context, th *testbed.Thread, addr string) error {
	p, err := openPinger(th, addr)
	if err != nil {
		return err
	}
	defer p.Close()
	for {
		if _, ok := p.pingOnce(ctx, 200e6); ok {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no reply from %s: %w", addr, ctx.Err())
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
