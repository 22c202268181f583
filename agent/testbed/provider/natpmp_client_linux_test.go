package provider_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/natpmp"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
)

// client returns an agent/natpmp client whose socket lives in the
// client namespace.
func (l *pmpLab) natpmpClient(t *testing.T) *natpmp.Client {
	t.Helper()
	conn, err := testbed.DialIn(context.Background(), l.client, "udp4", fmt.Sprintf("%s:%d", labGW, natpmp.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return natpmp.NewClient(conn)
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// protonMap is the ProtonVPN request for both protocols; both must get
// the same port.
func protonMap(t *testing.T, c *natpmp.Client) natpmp.Mapping {
	t.Helper()
	var got []natpmp.Mapping
	for _, p := range []natpmp.Protocol{natpmp.UDP, natpmp.TCP} {
		m, err := c.Map(tctx(t), p, 0, 1, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Protocol != p || m.InternalPort != 0 || m.Lifetime != 60*time.Second {
			t.Fatalf("Map %v = %+v", p, m)
		}
		got = append(got, m)
	}
	if got[0].ExternalPort != got[1].ExternalPort {
		t.Fatalf("UDP got port %d, TCP %d: a ProtonVPN-style gateway gives one port", got[0].ExternalPort, got[1].ExternalPort)
	}
	return got[1]
}

// The agent's client against the gateway, ProtonVPN style: map, renew,
// the port moved, a gateway that stops answering, a restarted one, delete.
func TestClientAgainstGatewayProton(t *testing.T) {
	l := newPMPLab(t, provider.NATPMP{Style: provider.StyleProton, Ports: []int{42000, 42001, 42002}, Epoch: 1000})
	gw := l.prov.NATPMP()
	c := l.natpmpClient(t)
	for _, p := range []uint16{42000, 42001, 42002} {
		l.listen(t, p)
	}

	addr, epoch, err := c.ExternalAddress(tctx(t))
	if err != nil || addr != labPublic || epoch < 1000 || epoch > 1005 {
		t.Fatalf("ExternalAddress = %v, %d, %v; want %v, epoch 1000", addr, epoch, err, labPublic)
	}
	m := protonMap(t, c)
	if m.ExternalPort != 42000 {
		t.Fatalf("mapped port %d, want the gateway's first, 42000", m.ExternalPort)
	}
	if got := l.reach(t, "tcp", 42000); got != "hit 42000" {
		t.Fatalf("public:42000 got %q, want the client", got)
	}
	if got := l.reach(t, "tcp", 42001); got != "" {
		t.Fatalf("unmapped public:42001 reached %q", got)
	}

	// renewal: the same port
	if m2 := protonMap(t, c); m2.ExternalPort != 42000 {
		t.Fatalf("renewal moved the port to %d", m2.ExternalPort)
	}

	// the provider moves the port: the old one is dead at once, the next
	// answer names the new one, which works
	if err := gw.ChangePort(); err != nil {
		t.Fatal(err)
	}
	if got := l.reach(t, "tcp", 42000); got != "" {
		t.Errorf("after ChangePort the old public:42000 still reached %q", got)
	}
	m = protonMap(t, c)
	if m.ExternalPort != 42001 {
		t.Fatalf("after ChangePort the port is %d, want 42001", m.ExternalPort)
	}
	if got := l.reach(t, "tcp", 42001); got != "hit 42001" {
		t.Fatalf("new public:42001 got %q, want the client", got)
	}

	// a gateway that stops answering: the client gives up within its
	// bound; the DNAT stays while its lease runs
	if err := gw.Down(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Map(tctx(t), natpmp.TCP, 0, 1, 60*time.Second)
	el := time.Since(start)
	t.Logf("silent gateway: gave up after %v: %v", el, err)
	if err == nil || !strings.Contains(err.Error(), "no response") {
		t.Fatalf("Map on a silent gateway: %v", err)
	}
	if bound := natpmp.InitialTimeout * (1<<natpmp.Tries - 1); el < bound || el > bound+2*time.Second {
		t.Fatalf("gave up after %v, want %v", el, bound)
	}
	if got := l.reach(t, "tcp", 42001); got != "hit 42001" {
		t.Errorf("while down, public:42001 got %q: leases must run on", got)
	}
	if err := gw.Up(); err != nil {
		t.Fatal(err)
	}
	m = protonMap(t, c)
	prevEpoch, prevAt := m.Epoch, time.Now()

	// a restart: mappings and DNATs gone, the epoch back to 0, which
	// Restarted sees
	if err := gw.Restart(); err != nil {
		t.Fatal(err)
	}
	if ms := mappings(t, gw); len(ms) != 0 {
		t.Fatalf("after Restart: %+v", ms)
	}
	if got := l.reach(t, "tcp", 42001); got != "" {
		t.Errorf("after Restart public:42001 still reached %q", got)
	}
	_, epoch, err = c.ExternalAddress(tctx(t))
	if err != nil || epoch > 1 {
		t.Fatalf("after Restart: epoch %d, %v; want 0", epoch, err)
	}
	if !natpmp.Restarted(prevEpoch, prevAt, epoch, time.Now()) {
		t.Fatalf("Restarted(%d, %d) = false", prevEpoch, epoch)
	}
	if natpmp.Restarted(prevEpoch, prevAt, prevEpoch, time.Now()) {
		t.Fatal("Restarted reports a gateway that did not restart")
	}
	m = protonMap(t, c)
	if got := l.reach(t, "tcp", m.ExternalPort); got != fmt.Sprintf("hit %d", m.ExternalPort) {
		t.Fatalf("after re-mapping, public:%d got %q", m.ExternalPort, got)
	}

	// delete
	for _, p := range []natpmp.Protocol{natpmp.UDP, natpmp.TCP} {
		d, err := c.Map(tctx(t), p, 0, 0, 0)
		if err != nil || d.ExternalPort != 0 || d.Lifetime != 0 {
			t.Fatalf("delete %v: %+v, %v", p, d, err)
		}
	}
	if ms := mappings(t, gw); len(ms) != 0 {
		t.Fatalf("after delete: %+v", ms)
	}
	if got := l.reach(t, "tcp", m.ExternalPort); got != "" {
		t.Errorf("after delete public:%d reached %q", m.ExternalPort, got)
	}
}

// RFC style, driven through the control socket as a provider process is:
// the requested port, a lease that runs out, ChangePort.
func TestClientAgainstGatewayRFC(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "natpmp.sock")
	l := newPMPLab(t, provider.NATPMP{Style: provider.StyleRFC, Ports: []int{43000}, Control: ctl})
	gw := provider.DialNATPMP(ctl)
	c := l.natpmpClient(t)
	l.listen(t, 6881)

	m, err := c.Map(tctx(t), natpmp.TCP, 6881, 6881, 2*time.Second)
	if err != nil || m.ExternalPort != 6881 || m.InternalPort != 6881 || m.Lifetime != 2*time.Second {
		t.Fatalf("Map = %+v, %v; want 6881 for 2 s", m, err)
	}
	if got := l.reach(t, "tcp", 6881); got != "hit 6881" {
		t.Fatalf("public:6881 got %q", got)
	}
	// the lease runs out: the DNAT goes
	deadline := time.Now().Add(5 * time.Second)
	for len(mappings(t, gw)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the 2 s lease still there after 5 s: %+v", mappings(t, gw))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := l.reach(t, "tcp", 6881); got != "" {
		t.Fatalf("after expiry public:6881 reached %q", got)
	}

	// the gateway moves it to its own port; the client's renewal (which
	// suggests 6881) gets the new one, still to internal 6881
	if _, err := c.Map(tctx(t), natpmp.TCP, 6881, 6881, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := gw.ChangePort(); err != nil {
		t.Fatal(err)
	}
	m, err = c.Map(tctx(t), natpmp.TCP, 6881, 6881, time.Minute)
	if err != nil || m.ExternalPort != 43000 || m.InternalPort != 6881 {
		t.Fatalf("after ChangePort: %+v, %v; want 43000 -> 6881", m, err)
	}
	if got := l.reach(t, "tcp", 43000); got != "hit 6881" {
		t.Fatalf("public:43000 got %q, want the client's 6881", got)
	}
	if got := l.reach(t, "tcp", 6881); got != "" {
		t.Fatalf("the old public:6881 reached %q", got)
	}
}
