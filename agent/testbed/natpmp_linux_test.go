package testbed

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/natpmp"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// The topology's provider with its NAT-PMP gateway, and a hand-made
// WireGuard client (ClientKey) in the host namespace: a lease forwards
// Endpoint4:P from the internet through the tunnel to the client's P,
// and the replies go back the same way.
func TestTopologyNATPMP(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces, WireGuard, nftables")
	tp, err := BuildTopology()
	if err != nil {
		t.Fatal(err)
	}
	var provs []*provider.Provider
	t.Cleanup(func() {
		for _, p := range provs {
			p.Close()
		}
		if err := tp.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	dir := t.TempDir()
	cfg := tp.ProviderConfig(filepath.Join(dir, "provider.log"))
	cfg.NATPMP = tp.NATPMP(provider.StyleProton)
	// The client answers the internet's side of pv0 through the tunnel,
	// as a confined namespace (default route into the tunnel) would.
	peer := tp.ClientPeer(tp.Name('x'))
	peer.Routes = append(peer.Routes, provider.Route{Dst: InetProvSide4.String() + "/32"})
	for _, s := range []struct {
		ns  string
		cfg *provider.Config
	}{{tp.Prov, cfg}, {tp.Host, &provider.Config{WireGuard: peer}}} {
		err := Do(s.ns, func() error {
			p, err := provider.Start(s.cfg)
			if err == nil {
				provs = append(provs, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	gw := provs[0].NATPMP()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := DialIn(ctx, tp.Host, "udp4", netip.AddrPortFrom(ProvTunnel4, NATPMPPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := natpmp.NewClient(conn)
	addr, _, err := c.ExternalAddress(ctx) // the first packet also makes the handshake
	if err != nil || addr != Endpoint4 {
		t.Fatalf("ExternalAddress = %v, %v; want %v", addr, err, Endpoint4)
	}
	m, err := c.Map(ctx, natpmp.TCP, 0, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := gw.Mappings()
	if m.ExternalPort != 40000 || len(ms) != 1 || ms[0].Client != ClientTunnel4 || ms[0].TargetPort != 40000 {
		t.Fatalf("Map = %+v, gateway has %+v; want 40000 for %v", m, ms, ClientTunnel4)
	}

	for _, port := range []uint16{m.ExternalPort, m.ExternalPort + 1} {
		var ln net.Listener
		if err := Do(tp.Host, func() (err error) {
			ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", ClientTunnel4, port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "hit %d from %s\n", port, c.RemoteAddr().(*net.TCPAddr).IP)
				c.Close()
			}
		}()
	}
	reach := func(port uint16) string {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := DialIn(cctx, tp.Inet, "tcp4", netip.AddrPortFrom(Endpoint4, port).String())
		if err != nil {
			return ""
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line)
	}
	if got, want := reach(m.ExternalPort), fmt.Sprintf("hit %d from %s", m.ExternalPort, InetProvSide4); got != want {
		t.Errorf("internet to %v:%d: %q, want %q", Endpoint4, m.ExternalPort, got, want)
	}
	if got := reach(m.ExternalPort + 1); got != "" {
		t.Errorf("internet to unmapped %v:%d reached %q", Endpoint4, m.ExternalPort+1, got)
	}
}
