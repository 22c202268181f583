package policy_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

const dormantDiff = "table is dormant (its hooks are off)"

// TestDormantTableDetected sets each table dormant, as an admin could with
// one nft command: the kernel keeps its chains and rules but runs none of
// its hooks. The kill switch is then off while every chain, rule, set and
// counter still reads back as expected, so Verify must report the flag, and
// Apply (the watchdog's repair) must clear it.
func TestDormantTableDetected(t *testing.T) {
	requireKernel(t)
	tb := newTestbed(t)

	t.Run("namespace table", func(t *testing.T) {
		// DNS to a server other than the tunnel's resolver: dropped in
		// output (EPERM) and counted by out_dns; let through, it leaves by
		// the tunnel device.
		probe := func(t *testing.T) bool {
			tx := txPackets(t, tb.conf, tbTun)
			err := sendUDP(t, tb.conf, "10.2.0.99:53")
			left := txPackets(t, tb.conf, tbTun) > tx
			if (err == nil) != left || (err != nil && !errors.Is(err, syscall.EPERM)) {
				t.Fatalf("probe: send error %v, left by the tunnel %t: neither dropped nor sent", err, left)
			}
			return left
		}
		tb.dormantCycle(t, tb.conf, tb.confPath, policy.Compile(tb.spec), policy.CounterOutDNS, probe)
	})

	t.Run("host table", func(t *testing.T) {
		// Without the namespace's own table (which would reject it first),
		// a connection from the namespace to the LAN through the host is
		// dropped in the host table's forward chain and counted by
		// fwd_from_ns; let through, it is answered by the LAN listener.
		if err := policy.Remove(tb.confPath, names.Table); err != nil {
			t.Fatal(err)
		}
		listenTCP(t, tb.lan, ":22")
		probe := func(t *testing.T) bool {
			// Long enough that a connection let through is answered under
			// load; a dropped one costs the full wait.
			err, _ := dialTCP(t, tb.conf, tbLANCli+":22", 2*time.Second)
			return err == nil
		}
		tb.dormantCycle(t, tb.host, tb.hostPath, policy.CompileHost(tb.spec), policy.CounterHostFwdFromNS, probe)
	})
}

// dormantCycle applies r in namespace ns (at nsPath), sets it dormant and
// applies it again. probe sends traffic the table drops and counts in
// counter, and says whether it got through.
func (tb *testbed) dormantCycle(t *testing.T, ns, nsPath string, r *policy.Ruleset, counter string, probe func(*testing.T) bool) {
	t.Helper()
	// dropped is the kill switch at work: the probe is stopped and counted.
	dropped := func(when string) {
		t.Helper()
		var through bool
		if n := tb.delta(t, nsPath, r.Name, counter, func() { through = probe(t) }); through || n == 0 {
			t.Errorf("%s: probe got through %t, %s counted %d: want dropped and counted", when, through, counter, n)
		}
	}
	verify := func(when string) *policy.State {
		t.Helper()
		st, err := policy.Inspect(nsPath, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Verify(r); err != nil || st.Dormant {
			t.Fatalf("%s: dormant %t, Verify %v: want the table as applied", when, st.Dormant, err)
		}
		return st
	}

	// Positive control: the applied table verifies and drops the probe.
	if err := policy.Apply(r, nsPath); err != nil {
		t.Fatal(err)
	}
	verify("applied")
	dropped("applied")

	gens := policy.NewGenWatch(nsPath)
	defer gens.Close()
	before, err := gens.Read()
	if err != nil {
		t.Fatal(err)
	}
	nsRun(t, ns, "nft", "add", "table", "inet", r.Name, "{ flags dormant; }")
	if !strings.Contains(nsRun(t, ns, "nft", "list", "table", "inet", r.Name), "flags dormant") {
		t.Fatal("nft did not set the table dormant")
	}
	// The health gate reads the table again only after a new generation.
	if after, err := gens.Read(); err != nil || after == before {
		t.Errorf("generation %v -> %v (%v): setting the table dormant did not move it", before, after, err)
	}

	st, err := policy.Inspect(nsPath, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Loaded || !st.Dormant {
		t.Errorf("dormant table: Inspect says loaded %t, dormant %t", st.Loaded, st.Dormant)
	}
	// The flag is the only difference: everything else is as applied.
	var mm *policy.MismatchError
	if err := st.Verify(r); !errors.As(err, &mm) || len(mm.Diffs) != 1 || mm.Diffs[0] != dormantDiff {
		t.Errorf("dormant table: Verify = %v, want only %q", err, dormantDiff)
	} else {
		t.Logf("dormant: %v", err)
	}
	if st.Fingerprint() == r.Fingerprint() {
		t.Error("dormant table: fingerprint unchanged")
	}
	// It really is off: the same probe gets through, and nothing counts it.
	var through bool
	if n := tb.delta(t, nsPath, r.Name, counter, func() { through = probe(t) }); !through || n != 0 {
		t.Errorf("dormant table: probe got through %t, %s counted %d: want through and uncounted", through, counter, n)
	}

	// The repair: Apply's atomic replace creates the table without the flag.
	if err := policy.Apply(r, nsPath); err != nil {
		t.Fatal(err)
	}
	verify("re-applied")
	if out := nsRun(t, ns, "nft", "list", "table", "inet", r.Name); strings.Contains(out, "dormant") {
		t.Errorf("re-applied table is still dormant:\n%s", out)
	}
	dropped("re-applied")
}
