package status

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/health"
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
