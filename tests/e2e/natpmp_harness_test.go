package e2e

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/natpmp"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// TestHarnessNATPMP checks the provider process's NAT-PMP gateway
// (harness.Options.NATPMP) without the agent: a hand-made WireGuard
// client maps a port through the tunnel, and the control socket sees and
// moves it.
func TestHarnessNATPMP(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	tp := harness.New(t, harness.Options{ProviderBin: env.providerBin, NATPMP: provider.StyleProton})
	tp.StartProcess(t, "client", tp.Host, env.providerBin, &provider.Config{WireGuard: tp.ClientPeer(tp.Name('x'))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := testbed.DialIn(ctx, tp.Host, "udp4", netip.AddrPortFrom(testbed.ProvTunnel4, testbed.NATPMPPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := natpmp.NewClient(conn)
	mapTCP := func() natpmp.Mapping {
		t.Helper()
		m, err := c.Map(ctx, natpmp.TCP, 0, 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := mapTCP()
	gw := tp.NATPMP()
	ms, err := gw.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Client != testbed.ClientTunnel4 || ms[0].ExternalPort != m.ExternalPort || m.ExternalPort != 40000 {
		t.Fatalf("mapped %+v, gateway has %+v; want 40000 for %v", m, ms, testbed.ClientTunnel4)
	}
	if err := gw.ChangePort(); err != nil {
		t.Fatal(err)
	}
	if m2 := mapTCP(); m2.ExternalPort == m.ExternalPort {
		t.Fatalf("after ChangePort still port %d", m2.ExternalPort)
	}
}
