package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// TestHostLinkTunnelFlowRerouted (issue 24.2): a long-lived UDP flow
// through the tunnel, whose route root in the namespace then moves to the
// host link (a policy rule for its source port, so that nothing else of
// the namespace changes route), is dropped and counted by the running agent's kill switch:
// established traffic leaves by the host link only for connections marked
// (names.HostLinkCtMark) at their first packet on it. The positive control
// is the same sequence against the same kill switch with the mark
// requirement cut out of its host-link rule (loaded with nft, the agent's
// watchdog slowed so it does not put its own back): the flow's packet
// leaves by the host link, where the host table catches it.
func TestHostLinkTunnelFlowRerouted(t *testing.T) {
	requireAgent(t)
	t.Parallel()
	s := newSite(t, siteOptions{})
	s.run(t, "--check-interval", "1h")
	s.mustTunnel(t, 5*time.Second, "after READY=1")
	echoAt := harness.AP(testbed.ProvTunnel4, testbed.EchoPort).String()
	veth := names.NSVeth(s.name)
	const flowTable = "4242"

	// flow opens a UDP flow through the tunnel, checks its echo, moves its
	// route to the host link and sends once more. It returns how much the
	// kill switch's out_reject and the host table's drop counters grew,
	// and whether the echo came back.
	flow := func(what string, flowPort int) (rejected, hostDropped uint64, echoed bool) {
		var c net.Conn
		if err := testbed.Do(s.name, func() (err error) {
			d := net.Dialer{LocalAddr: &net.UDPAddr{Port: flowPort}}
			c, err = d.Dial("udp", echoAt)
			return err
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer c.Close()
		say := func(p string) bool {
			c.Write([]byte(p))
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, err := c.Read(make([]byte, 64))
			return err == nil && n == len(p)
		}
		for i := 0; !say("through the tunnel"); i++ {
			if i == 3 {
				t.Fatalf("%s: the flow through the tunnel got no echo", what)
			}
		}
		// Only this flow's packets (its source port) take the host link:
		// the agent's own probes to the provider keep their route.
		s.tp.Exec(t, s.name, "ip", "route", "add", "default", "via", hostLinkHost.String(), "dev", veth, "table", flowTable)
		s.tp.Exec(t, s.name, "ip", "rule", "add", "priority", "100", "ipproto", "udp", "sport", fmt.Sprint(flowPort), "lookup", flowTable)
		defer func() {
			s.tp.Exec(t, s.name, "ip", "rule", "del", "priority", "100")
			s.tp.Exec(t, s.name, "ip", "route", "flush", "table", flowTable)
		}()
		ns0, h0 := tableCounters(s, s.name, names.Table), hostCounters(s)
		echoed = say("after the route change")
		time.Sleep(100 * time.Millisecond)
		ns1, h1 := tableCounters(s, s.name, names.Table), hostCounters(s)
		hostDropped = h1[policy.CounterHostFwdFromNS] + h1[policy.CounterHostInFromNS] - h0[policy.CounterHostFwdFromNS] - h0[policy.CounterHostInFromNS]
		return ns1[policy.CounterOutReject] - ns0[policy.CounterOutReject], hostDropped, echoed
	}

	rejected, hostDropped, echoed := flow("kill switch", 40777)
	if echoed || rejected == 0 || hostDropped != 0 {
		t.Errorf("tunnel flow rerouted to the host link: echoed=%v, out_reject grew by %d, host table dropped %d; want it dropped and counted in the namespace, nothing on the host link",
			echoed, rejected, hostDropped)
	}

	// The control: the same kill switch, its host-link rule without the
	// mark requirement (the rule before issue 24.2).
	listed := s.tp.Exec(t, s.name, "nft", "list", "table", "inet", names.Table)
	mark := "ct mark & 0x00002000 == 0x00002000 "
	if names.HostLinkCtMark != 0x2000 || strings.Count(listed, "ct state established,related "+mark) != 1 {
		t.Fatalf("the kill switch has no single host-link rule requiring the mark:\n%s", listed)
	}
	unmarked := strings.Replace(listed, "ct state established,related "+mark, "ct state established,related ", 1)
	if err := s.tp.NFT(s.name, "delete table inet "+names.Table+"\n"+unmarked); err != nil {
		t.Fatalf("load the control ruleset: %v", err)
	}
	rejected, hostDropped, _ = flow("control", 40778)
	if rejected != 0 || hostDropped == 0 {
		t.Errorf("positive control (no mark required): out_reject grew by %d, host table dropped %d; want the packet out by the host link (the host table's counter)", rejected, hostDropped)
	}
}
