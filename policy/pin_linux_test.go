package policy_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// TestPinTable, with the real kernel: the pin table, loaded where the
// tunnel's socket lives (the sidecar bed's pod plays the host namespace),
// lets the tunnel's packets (the device's mark; for the userspace backend
// also the agent's cgroup) go only to the pinned endpoint: another
// address or another port is dropped and counted, while the agent's
// unmarked packets (its DNS) and another program's marked ones pass.
// Positive control: without the table the same probes arrive. SetPinned
// moves the pin (a failover) in place: the table's handle and its counter
// are kept.
func TestPinTable(t *testing.T) {
	b := newSidecarBed(t)
	const other = scGateway + ":51820" // an address the config never named
	const otherPort = "203.0.113.5:9999"
	ep, ol, pl := b.listen(t, scEndpoint), b.listen(t, other), b.listen(t, otherPort)
	spec := &config.Spec{Name: "pin"}
	table := names.PinTable(spec.Name)
	type probe struct {
		name    string
		cg      string
		mark    int
		dst     string
		l       *nodeListener
		blocked bool
	}
	n := 0
	check := func(t *testing.T, p probe, pinned bool) {
		t.Helper()
		n++
		token := fmt.Sprintf("pin-%d-%d", n, time.Now().UnixNano())
		out := b.probe(t, p.cg, "udp", p.mark, p.dst, token)
		if want := !(pinned && p.blocked); p.l.got(token) != want {
			t.Errorf("%s (pinned %t): arrived %t, want %t (probe said %q)", p.name, pinned, !want, want, out)
		}
	}
	run := func(t *testing.T, env policy.PinEnv, probes []probe) {
		r, err := policy.CompilePin(spec, env)
		if err != nil {
			t.Fatal(err)
		}
		if err := policy.Apply(r, b.podPath); err != nil {
			t.Fatal(err)
		}
		for _, p := range probes {
			check(t, p, true)
		}
		if c := counter(t, b.podPath, table, policy.CounterPinDrop); c == 0 {
			t.Errorf("the dropped probes were not counted in %s", policy.CounterPinDrop)
		}
		st, err := policy.Inspect(b.podPath, table)
		if err != nil || st.Verify(r) != nil {
			t.Fatalf("Verify of the applied pin table: %v %v", err, st.Verify(r))
		}
		// Positive controls: no table, every probe arrives.
		if err := policy.Remove(b.podPath, table); err != nil {
			t.Fatal(err)
		}
		for _, p := range probes {
			check(t, p, false)
		}
	}
	pinned := []netip.AddrPort{netip.MustParseAddrPort(scEndpoint)}
	t.Run("userspace", func(t *testing.T) {
		run(t, policy.PinEnv{Mark: scMark, Agent: &b.agent, Endpoints: pinned}, []probe{
			{"the tunnel to its endpoint", b.agentCg, scMark, scEndpoint, ep, false},
			{"the tunnel to another address", b.agentCg, scMark, other, ol, true},
			{"the tunnel to another port of the endpoint", b.agentCg, scMark, otherPort, pl, true},
			{"the agent's unmarked socket (its DNS) elsewhere", b.agentCg, 0, other, ol, false},
			{"another program with the same mark", b.appCg, scMark, other, ol, false},
		})
	})
	t.Run("kernel", func(t *testing.T) {
		run(t, policy.PinEnv{Mark: scMark, Endpoints: pinned}, []probe{
			{"the tunnel to its endpoint", b.appCg, scMark, scEndpoint, ep, false},
			{"the tunnel to another address", b.appCg, scMark, other, ol, true},
			{"an unmarked packet elsewhere", b.appCg, 0, other, ol, false},
		})
	})
	t.Run("moved in place", func(t *testing.T) {
		r, err := policy.CompilePin(spec, policy.PinEnv{Mark: scMark, Agent: &b.agent, Endpoints: pinned})
		if err != nil {
			t.Fatal(err)
		}
		if err := policy.Apply(r, b.podPath); err != nil {
			t.Fatal(err)
		}
		check(t, probe{"before the move: another address", b.agentCg, scMark, other, ol, true}, true)
		h, c := tableHandle(t, b.pod, table), counter(t, b.podPath, table, policy.CounterPinDrop)
		moved := []netip.AddrPort{netip.MustParseAddrPort(other)}
		inNS(t, b.pod, func() { err = policy.SetPinned(table, moved) })
		if err != nil {
			t.Fatal(err)
		}
		check(t, probe{"after the move: the new endpoint", b.agentCg, scMark, other, ol, false}, true)
		check(t, probe{"after the move: the old endpoint", b.agentCg, scMark, scEndpoint, ep, true}, true)
		if h2 := tableHandle(t, b.pod, table); h2 != h {
			t.Errorf("SetPinned replaced the table (handle %s -> %s)", h, h2)
		}
		if c2 := counter(t, b.podPath, table, policy.CounterPinDrop); c2 <= c {
			t.Errorf("the drop counter was reset or missed the old endpoint (%d -> %d)", c, c2)
		}
		want, err := policy.CompilePin(spec, policy.PinEnv{Mark: scMark, Agent: &b.agent, Endpoints: moved})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := policy.Inspect(b.podPath, table); err != nil || st.Verify(want) != nil {
			t.Errorf("after SetPinned the table is not the moved pin's: %v %v", err, st.Verify(want))
		}
	})
}

// TestPinRenderMatchesApply: the kernel backend's pin table as Render
// prints it compiles in nft to the bytecode Apply loads (the mark match is
// nft's own).
func TestPinRenderMatchesApply(t *testing.T) {
	requireKernel(t)
	r, err := policy.CompilePin(&config.Spec{Name: "pin"}, policy.PinEnv{Mark: 0x7663, Endpoints: []netip.AddrPort{
		netip.MustParseAddrPort("203.0.113.5:51820"), netip.MustParseAddrPort("[2001:db8::5]:443")}})
	if err != nil {
		t.Fatal(err)
	}
	textNS, _ := newNS(t)
	applyNS, applyPath := newNS(t)
	f := filepath.Join(t.TempDir(), "pin.nft")
	if err := os.WriteFile(f, []byte(r.Render()), 0o600); err != nil {
		t.Fatal(err)
	}
	nsRun(t, textNS, "nft", "-f", f)
	if err := policy.Apply(r, applyPath); err != nil {
		t.Fatal(err)
	}
	if bt, ba := bytecode(t, textNS, r.Name), bytecode(t, applyNS, r.Name); bt != ba {
		t.Errorf("bytecode differs:\n--- nft -f Render()\n%s\n--- Apply\n%s", bt, ba)
	}
}
