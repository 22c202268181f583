package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// The leak matrix from inside a container (issue 22): the matrix's rows
// that probe from the confined namespace (every row with a probe.Spec: all
// but getent through `vpn-agent exec` and the inbound rows, which start
// outside it) run from a podman container joined to the namespace with
// the flags of `vpn-agent podman-flags`, by tests/cmd/netprobe (static, in
// the container's root), in the matrix's key states, each in a window of
// its own judged by the matrix's code (captures on uplink, LAN link and
// host link; every decoy's log). Each negative row's positive control is
// the same probe in a container of the same root and flags on the
// topology's host or LAN namespace, where there is no kill switch: it
// reaches its target and a capture or log sees it. The containers keep
// podman's default capabilities less the flags' drops: ping goes out
// through the ICMP echo socket the agent's namespace allows to every
// group (the control namespaces are given the same ping_group_range).

// ctrColumns are the container matrix's states.
var ctrColumns = []column{
	{"ctl", "positive controls: the same probe in a container of the same root and flags on the topology's host or LAN namespace (no kill switch) reaches its target, and a capture or server log sees it (tunnel probes: state 1)"},
	{"1", "healthy (first topology)"},
	{"2", "peer unreachable, interface up (the provider's WireGuard UDP dropped)"},
	{"F", "after failing over: the first server of a pool killed, the agent healthy on the second, which the container reaches through the tunnel (third topology, \"ipv6\": \"block\")"},
	{"D", "every server of the pool dead (third topology)"},
}

// newCtrMatrix is the container matrix of rows: each row with a spec, run
// by the confined container of the site, its control by the site's
// container on the row's control namespace.
func newCtrMatrix(rows []*mrow) *matrix {
	var out []*mrow
	for _, r := range rows {
		if r.spec.Op == "" {
			continue
		}
		cr := *r
		cr.run = func(s *site) probe.Result { return s.ctr.run(s.ctr.confined, r.spec)[0] }
		if r.kind == kNeg {
			cr.ctl = func(s *site) probe.Result { return s.ctr.run(s.ctr.plain[r.ctlFrom], r.control())[0] }
		}
		out = append(out, &cr)
	}
	mx := newMatrix(out)
	mx.container = true
	mx.columns = ctrColumns
	return mx
}

// where prefixes the container matrix's messages.
func (mx *matrix) where() string {
	if mx.container {
		return "podman container: "
	}
	return ""
}

// ctrProbes are a site's containers for the container matrix.
type ctrProbes struct {
	pm       *podman
	confined string          // in the confined namespace, with the flags of podman-flags
	plain    map[from]string // the same root and flags on the topology's host and LAN namespaces
}

// startContainers starts the site's confined container and, with
// controls, the control containers; a no-op without the container matrix.
func (mx *matrix) startContainers(s *site, controls bool) {
	t := s.t
	if mx.ctr == nil {
		return
	}
	pm := podmanFor(t)
	bin, err := os.ReadFile(env.netprobeBin)
	if err != nil {
		t.Fatal(err)
	}
	pm.files = map[string][]byte{"netprobe": bin}
	start := time.Now()
	flags := podmanFlags(t, s.ag, s.name)
	c := &ctrProbes{pm: pm, confined: pm.start(t, flags), plain: map[from]string{}}
	if controls {
		for _, f := range []from{fromHost, fromLAN} {
			// As the agent sets it in its namespace: unprivileged ping.
			s.tp.Exec(t, f.ns(s), "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647")
			c.plain[f] = pm.start(t, withNetwork(flags, f.ns(s)))
		}
	}
	s.ctr = c
	mx.ctr.note("%s: %d containers started in %v", s.name, 1+len(c.plain), time.Since(start).Round(100*time.Millisecond))
}

// run runs specs in container ctr with netprobe, concurrently; when
// netprobe cannot run, every result is Failed (a positive row or control
// then fails, a negative row proves nothing and is no leak).
func (c *ctrProbes) run(ctr string, specs ...probe.Spec) []probe.Result {
	rs := make([]probe.Result, len(specs))
	arg, err := json.Marshal(specs)
	var stdout, stderr bytes.Buffer
	if err == nil {
		cmd := exec.Command("podman", append(append([]string(nil), c.pm.base...), "exec", ctr, "/bin/netprobe", string(arg))...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
	}
	if err == nil {
		if err = json.Unmarshal(stdout.Bytes(), &rs); err == nil && len(rs) != len(specs) {
			err = fmt.Errorf("%d results for %d probes", len(rs), len(specs))
		}
	}
	if err != nil {
		rs = make([]probe.Result, len(specs))
		for i, s := range specs {
			rs[i] = probe.Result{Probe: fmt.Sprintf("%s %v in container %s", s.Op, s.Dst, ctr), Outcome: probe.Failed,
				Err: fmt.Errorf("podman exec netprobe: %w: %s%s", err, stderr.String(), stdout.String())}
		}
		return rs
	}
	for i := range rs {
		rs[i].Probe = strings.Replace(rs[i].Probe, probe.Here, "container "+ctr, 1)
	}
	return rs
}

// round runs rows from the confined container, in one netprobe.
func (c *ctrProbes) round(rows []*mrow) []probe.Result {
	specs := make([]probe.Spec, len(rows))
	for i, r := range rows {
		specs[i] = r.spec
	}
	return c.run(c.confined, specs...)
}

// controls runs rows' controls from the control containers, one netprobe
// each.
func (c *ctrProbes) controls(rows []*mrow) []probe.Result {
	rs := make([]probe.Result, len(rows))
	for _, f := range []from{fromHost, fromLAN} {
		var idx []int
		var specs []probe.Spec
		for i, r := range rows {
			if r.ctlFrom == f {
				idx = append(idx, i)
				specs = append(specs, r.control())
			}
		}
		for k, res := range c.run(c.plain[f], specs...) {
			rs[idx[k]] = res
		}
	}
	return rs
}

// ctrState runs the container matrix's state sp on site s, as it is now:
// one round from the confined container; extra, if given, adds to it.
func (mx *matrix) ctrState(s *site, sp stateSpec, extra ...func(w *window)) {
	cx := mx.ctr
	if cx == nil || s.ctr == nil {
		return
	}
	cx.setBackend(s.backend)
	start := time.Now()
	cx.state(s, sp, func(w *window) {
		w.roundBy(cx.rows, func() []probe.Result { return s.ctr.round(cx.rows) })
		for _, f := range extra {
			f(w)
		}
	})
	cx.note("state %s: %d probes from container %s, the window's controls and judging took %v", sp.col, len(cx.rows), s.ctr.confined, time.Since(start).Round(100*time.Millisecond))
}

// ctrAfterFailover is state F's positive control: the container reaches
// the second server's echo through the tunnel and resolves at its
// resolver.
func (mx *matrix) ctrAfterFailover(s *site) func(w *window) {
	return func(w *window) {
		specs := []probe.Spec{
			{Op: probe.OpTCPEcho, Dst: harness.AP(testbed.Prov2Tunnel4, testbed.EchoPort), Payload: harness.Marker("ctr-pool")},
			{Op: probe.OpDNS, Dst: harness.AP(testbed.Prov2Tunnel4, 53), Network: "udp", Name: testbed.TargetName, QType: dnsmessage.TypeA},
		}
		for _, sp := range specs {
			r := harness.Eventually(5*time.Second, func() probe.Result { return s.ctr.run(s.ctr.confined, sp)[0] })
			if !r.Reached() || (sp.Op == probe.OpDNS && (len(r.Addrs) != 1 || r.Addrs[0] != testbed.Prov2Tunnel4)) {
				w.fail("positive control: after the failover the container does not reach the second server through the tunnel: %v", r)
				continue
			}
			w.controls++
		}
	}
}
