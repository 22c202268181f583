package status

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// A status report is its health report rendered: the same problems, once
// each, and healthy exactly when health found nothing.
func TestRenderIsTheHealthReport(t *testing.T) {
	h := &health.Report{Name: "torrent", Interface: "vc-torrent", Namespace: true,
		Link:   health.Link{Present: true, Up: false, MTU: 1420, Addresses: []string{"10.2.0.2/32"}},
		Policy: health.Policy{Loaded: true, Matches: true, Rules: 12, Drops: map[string]uint64{"drop_out": 3}}}
	h.Add(health.TunnelMissing, "interface vc-torrent is down")
	h.Add(health.TunnelMissing, "interface vc-torrent missing")
	r := render(h)
	if r.Healthy || !slices.Equal(r.Problems, []string{"interface vc-torrent is down"}) {
		t.Errorf("healthy=%v problems=%q, want degraded with the one tunnel problem", r.Healthy, r.Problems)
	}
	if r.Name != "torrent" || r.Interface != "vc-torrent" || r.LinkUp || r.MTU != 1420 || r.Policy.Rules != 12 || r.Policy.Drops["drop_out"] != 3 {
		t.Errorf("facts not carried over: %+v", r)
	}
	if r := render(&health.Report{Name: "x"}); !r.Healthy || r.Problems != nil {
		t.Errorf("no problems: healthy=%v problems=%q", r.Healthy, r.Problems)
	}
}

// status --json keeps its field names (tests/e2e and tests/vm/guest parse
// them).
func TestJSONFields(t *testing.T) {
	now, age := time.Now(), 1.5
	r := &Report{Name: "n", Problems: []string{"p"}, Backend: "kernel", AgentPID: 1, Addresses: []string{"a"}, MTU: 1,
		Peers:  []Peer{{Endpoint: "e", LatestHandshake: &now, HandshakeAgeSec: &age, Keepalive: 25}},
		Policy: Policy{Drops: map[string]uint64{"d": 1}}, DNS: []string{"d"}, HostLink: "h"}
	b, _ := json.Marshal(r)
	var m map[string]any
	json.Unmarshal(b, &m)
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	if want := []string{"addresses", "agentPid", "agentRunning", "backend", "dns", "forwardedPort", "healthy", "hostLink", "interface", "linkUp", "mtu", "name", "peers", "policy", "problems"}; !slices.Equal(keys(m), want) {
		t.Errorf("status fields %q, want %q", keys(m), want)
	}
	if want := []string{"dropPackets", "loaded", "matchesConfig", "rules"}; !slices.Equal(keys(m["policy"].(map[string]any)), want) {
		t.Errorf("policy fields %q, want %q", keys(m["policy"].(map[string]any)), want)
	}
	if want := []string{"endpoint", "handshakeAgeSeconds", "keepaliveSeconds", "latestHandshake", "rxBytes", "txBytes"}; !slices.Equal(keys(m["peers"].([]any)[0].(map[string]any)), want) {
		t.Errorf("peer fields %q, want %q", keys(m["peers"].([]any)[0].(map[string]any)), want)
	}
}

// status (a process of its own) expects the sidecar kill switch the agent
// loads: with the kernel backend recorded in the state file, the tunnel's
// port-and-mark rule, without it none. It once expected the userspace
// table on the kernel backend and called the agent's table "changed".
func TestSidecarRulesetFollowsTheBackend(t *testing.T) {
	agentOf := func() (policy.AgentSocket, error) { return policy.AgentSocket{CgroupID: 4242, Level: 3}, nil }
	s := &config.Spec{
		Name: "pod", Interface: "vc-pod", ListenPort: names.SidecarListenPort,
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.2.0.2/32")},
		DNSMode:   config.DNSStrict, DNS: []netip.Addr{netip.MustParseAddr("10.2.0.1")},
		Peers:   []config.PeerSpec{{Endpoint: "198.51.100.1:51820"}},
		Sidecar: &config.Sidecar{},
	}
	for _, tc := range []struct {
		backend config.Backend
		want    bool
	}{{config.BackendKernel, true}, {config.BackendUserspace, false}} {
		r, err := sidecarRulesetOf(s, tc.backend, agentOf)(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(r.Render(), fmt.Sprintf("meta mark 0x%08x udp sport %d", names.SidecarFwMark, names.SidecarListenPort)); got != tc.want {
			t.Errorf("backend %s: port-and-mark rule %t, want %t", tc.backend, got, tc.want)
		}
	}
}
