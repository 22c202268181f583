package guest

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// TestKernelLossFailover (`vmsummary: failover-kernel-loss ok ...|FAIL`): the warm-standby
// failover of TestKernelStandbyFailover with health.fast (a DNS probe every second, dead
// after 2 failures in a row) on a lossy path: netem as vpn-bench's loss1pct scenario (5 ms
// and 0.5 % loss each way, about 1 % per round trip) on both providers' links. First a
// window of VMTEST_NOFLAP_ROUNDS probe rounds (default 30) with the tunnel healthy and a
// datagram echo stream through it: the probe-based judge must not flap. No status poll
// (one a round) may see it other than healthy on server 0 with the standby warm and no
// failover counted, and the agent's log may hold no verdict ("tunnel dead") and no standby
// replaced. Then the first provider's WireGuard dies with the loss still on, and the
// switch must happen and pass every check of kernelFailover (the loss is taken off only
// after it, for the checks of the state after). Positive controls: the netem qdiscs
// dropped packets during the window (the loss was real), and the first provider's
// resolver logged the probes (the judge was judging). Over the window also 2 × 1000 pings
// cross the shaped links from the internet namespace (the loss's control needs packets).
func TestKernelLossFailover(t *testing.T) {
	kernelFailover(t, failoverCase{summary: "failover-kernel-loss", shared: true, lossy: true})
}

// failoverCase is one variant of kernelFailover.
type failoverCase struct {
	summary string // the vmsummary check's name
	// shared: the pool shares one client key and address, so the second server is a warm
	// standby peer on the kernel device before the first dies (issue 25).
	shared bool
	// lossy: health.fast, the providers' links shaped (lossShaping), and a no-flap window
	// (lossWindow) before the death.
	lossy bool
}

// lossShaping is vpn-bench's loss1pct scenario (agent/bench/shaping.go), per direction.
var lossShaping = []string{"delay", "5ms", "loss", "0.5%"}

// lossWindow is a no-flap window's outcome, and the shaping it left on.
type lossWindow struct {
	qdiscs                   [][2]string // namespace, device: the netem qdiscs
	rounds, probes, failed   int         // status polls; probes the resolver logged; "probe failed" lines
	echoes, echoLost, drops  int         // echo stream datagrams sent and not answered; netem drops
	verdicts, standbyDropped int         // "tunnel dead" and "standby ... replacing it" lines
	pings                    string      // the ping streams' summaries (the loss's control)
}

// noFlapRounds is the window in probe rounds (health.fast: seconds).
func noFlapRounds(t *testing.T) int {
	s := os.Getenv("VMTEST_NOFLAP_ROUNDS")
	if s == "" {
		return 30
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("VMTEST_NOFLAP_ROUNDS=%q: want a number of probe rounds, at least 1", s)
	}
	return n
}

// shapeProviders puts netem (lossShaping) on both ends of both providers' links: the inet
// side's pv0 and pv1 and each provider's up0. The host uplink stays as it is (its capture's
// positive controls must not be lost).
func shapeProviders(t *testing.T, tp *kernelTopo, p2 *testbed.Provider2) *lossWindow {
	t.Helper()
	w := &lossWindow{qdiscs: [][2]string{{tp.Inet, testbed.InetProvIf}, {tp.Prov, testbed.ProvUplinkIf},
		{tp.Inet, testbed.InetProv2If}, {p2.NS, testbed.ProvUplinkIf}}}
	for _, q := range w.qdiscs {
		tp.Exec(t, q[0], append([]string{"tc", "qdisc", "replace", "dev", q[1], "root", "netem"}, lossShaping...)...)
	}
	return w
}

// unshape removes the netem qdiscs (nil: nothing to do).
func (w *lossWindow) unshape(t *testing.T, tp *kernelTopo) {
	if w == nil {
		return
	}
	for _, q := range w.qdiscs {
		tp.Exec(t, q[0], "tc", "qdisc", "del", "dev", q[1], "root")
	}
}

var pingLossRE = regexp.MustCompile(`\d+ packets transmitted, \d+ received.*?\d+(\.\d+)?% packet loss`)

var netemDropRE = regexp.MustCompile(`qdisc netem .*\n\s*Sent \d+ bytes \d+ pkt \(dropped (\d+),`)

// dropped sums the netem qdiscs' drop counters.
func (w *lossWindow) dropped(t *testing.T, tp *kernelTopo) int {
	n := 0
	for _, q := range w.qdiscs {
		out := tp.Exec(t, q[0], "tc", "-s", "qdisc", "show", "dev", q[1])
		m := netemDropRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no netem statistics on %s/%s:\n%s", q[0], q[1], out)
		}
		d, _ := strconv.Atoi(m[1])
		n += d
	}
	return n
}

// noFlap shapes the providers' links and watches the healthy tunnel for rounds probe
// rounds (see TestKernelLossFailover); the shaping stays on. It fails t on any false
// verdict or switch.
func noFlap(t *testing.T, tp *kernelTopo, p2 *testbed.Provider2, ag agentproc.Agent, d *agentproc.Daemon, name string, rounds int) *lossWindow {
	t.Helper()
	w := shapeProviders(t, tp, p2)
	logFrom := len(d.Output())
	mark := tp.Tunnel.Mark()
	payload := harness.Marker("noflap")
	stopEcho := harness.Repeat(50*time.Millisecond, func() {
		w.echoes++
		if r := probe.UDPEcho(name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), payload); !r.Reached() {
			w.echoLost++
		}
	})
	// The loss's positive control: a ping stream from the internet to both endpoints across
	// the shaped links (2 × 1000 echoes, each crossing two netem qdiscs: about 20 drops
	// expected), so that "netem dropped packets" does not hang on the few the tunnel sends.
	pinged := make(chan string, 1)
	go func() {
		var sum []string
		for _, ep := range []netip.Addr{testbed.Endpoint4, testbed.Endpoint2} {
			out, _ := harness.Output(tp.Inet, "ping", "-q", "-n", "-i", "0.005", "-c", "1000", ep.String())
			sum = append(sum, ep.String()+": "+pingLossRE.FindString(string(out)))
		}
		pinged <- strings.Join(sum, ", ")
	}()
	var bad []string
	start := time.Now()
	for i := 1; i <= rounds; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second)))
		rc, m := ag.StatusJSON(t, name)
		w.rounds++
		rec, idx := harness.JSONField(m, "tunnel", "recovery"), harness.JSONField(m, "server", "index")
		fo, sb := harness.JSONField(m, "tunnel", "failovers"), harness.JSONField(m, "tunnel", "standby", "state")
		if rc != 0 || rec != "healthy" || idx != 0.0 || fo != 0.0 || sb != "warm" {
			bad = append(bad, fmt.Sprintf("%.1fs: status rc %d, recovery %v, server %v, failovers %v, standby %v",
				time.Since(start).Seconds(), rc, rec, idx, fo, sb))
		}
	}
	stopEcho()
	w.pings = <-pinged
	log := d.Output()[logFrom:]
	w.failed = strings.Count(log, "probe failed")
	w.verdicts = strings.Count(log, "tunnel dead")
	w.standbyDropped = strings.Count(log, "the standby server does not answer")
	for _, e := range harness.Hits(t, tp.Tunnel, mark) {
		if e.Kind == provider.EvDNS && harness.HostOf(e.Src) == testbed.ClientTunnel4 {
			w.probes++
		}
	}
	w.drops = w.dropped(t, tp)
	t.Logf("no-flap window under loss (%v each way on both providers' links): %d rounds in %.0f s, %d probes at the resolver, %d probe failures, "+
		"%d false verdicts, %d standbys replaced, %d status polls not healthy; echo stream %d sent, %d unanswered; pings from the internet %s; netem dropped %d",
		lossShaping, w.rounds, time.Since(start).Seconds(), w.probes, w.failed, w.verdicts, w.standbyDropped, len(bad), w.echoes, w.echoLost, w.pings, w.drops)
	for _, b := range bad {
		t.Errorf("FLAP under loss: %s", b)
	}
	if w.verdicts > 0 || w.standbyDropped > 0 {
		t.Errorf("FLAP under loss: the agent judged the healthy tunnel dead %d times, its standby %d times:\n%s", w.verdicts, w.standbyDropped, log)
	}
	// Positive controls: the loss was on the path, and the judge was probing.
	if w.drops == 0 {
		t.Errorf("positive control: netem dropped nothing in %d rounds (%d echoes; pings %s): the window proves nothing", w.rounds, w.echoes, w.pings)
	}
	if w.probes < rounds*3/4 {
		t.Errorf("positive control: the first provider's resolver logged %d probes from the client in %d rounds (health.fast: one a second)", w.probes, rounds)
	}
	return w
}

// String is the window's part of the vmsummary line.
func (w *lossWindow) String() string {
	if w == nil {
		return ""
	}
	return fmt.Sprintf(" rounds=%d probes=%d probefailed=%d verdicts=%d standbyreplaced=%d drops=%d echolost=%d/%d",
		w.rounds, w.probes, w.failed, w.verdicts, w.standbyDropped, w.drops, w.echoLost, w.echoes)
}
