package policy_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// sidecarSpec is a resolved sidecar config: a Kubernetes pod with cluster
// DNS, metrics for the kubelet and port forwarding.
func sidecarSpec() *config.Spec {
	s := portForwardSpec()
	s.Name, s.Interface = "pod", "vc-pod"
	s.Sidecar = &config.Sidecar{
		AllowedSubnets: []netip.Prefix{pfx("10.42.0.0/16"), pfx("10.43.0.0/16"), pfx("10.42.7.0/24")},
		ClusterDNS:     &config.ClusterDNS{Server: ip("10.43.0.10"), Domains: []string{"cluster.local"}},
	}
	s.Metrics = &config.Listen{Network: "tcp", Address: "0.0.0.0:9586"}
	return s
}

var (
	sidecarAgent     = policy.AgentSocket{CgroupID: 4242, Level: 4}
	sidecarEndpoints = []netip.AddrPort{netip.MustParseAddrPort("198.51.100.1:51820"), netip.MustParseAddrPort("198.51.100.2:1637")}
)

func compileSidecar(t testing.TB, s *config.Spec, a policy.AgentSocket) *policy.Ruleset {
	t.Helper()
	r, err := policy.CompileSidecar(s, a, sidecarEndpoints)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGoldenSidecar(t *testing.T) {
	golden(t, "sidecar.nft", compileSidecar(t, sidecarSpec(), sidecarAgent).Render())
	// Inside a cgroup namespace the agent's level is unknown: the id is
	// matched at every level.
	unknown := policy.AgentSocket{CgroupID: 4242}
	golden(t, "sidecar-level-unknown.nft", compileSidecar(t, sidecarSpec(), unknown).Render())
	// The kernel backend: its packets by the tunnel's mark and port.
	kernel := sidecarAgent
	kernel.Kernel = true
	s := sidecarSpec()
	s.ListenPort = 51820
	golden(t, "sidecar-kernel.nft", compileSidecar(t, s, kernel).Render())
}

// TestSidecarKernelMatch: with the kernel backend the only mark match is
// the one rule that also requires the tunnel's listen port as source and
// the endpoints as destination; without a listen port the table is not
// compiled (it could not know the kernel's packets).
func TestSidecarKernelMatch(t *testing.T) {
	kernel := sidecarAgent
	kernel.Kernel = true
	s := sidecarSpec()
	s.ListenPort, s.FwMark = 41000, 7
	r := compileSidecar(t, s, kernel)
	var marked []string
	for _, c := range r.Chains {
		for _, rule := range c.Rules {
			if strings.Contains(rule.String(), "meta mark") {
				marked = append(marked, c.Name+": "+rule.String())
			}
		}
	}
	want := "out_pod: meta mark 0x00000007 udp sport 41000 ip daddr @endpoints4 udp dport @wg_ports accept"
	if len(marked) != 1 || !strings.HasPrefix(marked[0], want) {
		t.Fatalf("mark rules %q, want one starting %q", marked, want)
	}
	s.ListenPort = 0
	if _, err := policy.CompileSidecar(s, kernel, sidecarEndpoints); err == nil || !strings.Contains(err.Error(), "listen port") {
		t.Fatalf("kernel backend without a listen port: %v", err)
	}
}

// TestSidecarAgentMatch: the agent's packets are told apart by their
// socket's cgroup and never by a mark, and the pod side ends refusing.
func TestSidecarAgentMatch(t *testing.T) {
	for _, tc := range []struct {
		agent  policy.AgentSocket
		levels []uint32
	}{
		{sidecarAgent, []uint32{4}},
		{policy.AgentSocket{CgroupID: 4242}, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
	} {
		r := compileSidecar(t, sidecarSpec(), tc.agent)
		var got []uint32
		for _, rule := range r.Chain("out_pod").Rules {
			for _, e := range rule.Exprs {
				if sc, ok := e.(policy.SocketCgroup); ok {
					if sc.ID != 4242 || rule.Exprs[len(rule.Exprs)-1] != (policy.Goto{Chain: "out_agent"}) {
						t.Fatalf("agent rule %s", rule)
					}
					got = append(got, sc.Level)
				}
			}
		}
		if len(got) != len(tc.levels) {
			t.Fatalf("agent matched at levels %v, want %v", got, tc.levels)
		}
		for i := range got {
			if got[i] != tc.levels[i] {
				t.Fatalf("agent matched at levels %v, want %v", got, tc.levels)
			}
		}
		text := r.Render()
		if strings.Contains(text, "meta mark") || strings.Contains(text, "ct mark") || strings.Contains(text, "socket mark") {
			t.Fatal("the sidecar table matches a mark, which an app with CAP_NET_RAW can set")
		}
		for _, c := range []string{"out_pod", "out_agent"} {
			rules := r.Chain(c).Rules
			if last := rules[len(rules)-1]; last.Exprs[len(last.Exprs)-1] != (policy.Reject{}) {
				t.Errorf("%s does not end refusing: %s", c, last)
			}
		}
	}
}

func TestCompileSidecarRefuses(t *testing.T) {
	v6 := []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:51820")}
	inside := []netip.AddrPort{netip.MustParseAddrPort("10.42.3.4:51820")}
	for _, tc := range []struct {
		name      string
		spec      *config.Spec
		agent     policy.AgentSocket
		endpoints []netip.AddrPort
		want      string
	}{
		{"host mode spec", baseSpec(), sidecarAgent, sidecarEndpoints, "no sidecar section"},
		{"root cgroup", sidecarSpec(), policy.AgentSocket{CgroupID: 1, Level: 0}, sidecarEndpoints, "root cgroup"},
		{"no cgroup", sidecarSpec(), policy.AgentSocket{}, sidecarEndpoints, "root cgroup"},
		{"too deep", sidecarSpec(), policy.AgentSocket{CgroupID: 9, Level: policy.MaxCgroupLevel + 1}, sidecarEndpoints, "levels deep"},
		{"no endpoint", sidecarSpec(), sidecarAgent, nil, "no WireGuard endpoint"},
		{"ipv6 endpoint", sidecarSpec(), sidecarAgent, v6, "only IPv4"},
		{"endpoint in allowedSubnets", sidecarSpec(), sidecarAgent, inside, "inside sidecar.allowedSubnets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := policy.CompileSidecar(tc.spec, tc.agent, tc.endpoints)
			if err == nil || !strings.Contains(err.Error(), tc.want) || r != nil {
				t.Fatalf("CompileSidecar: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestCompileNamespaceChooses: the one place the variant is chosen.
func TestCompileNamespaceChooses(t *testing.T) {
	host, err := policy.CompileNamespace(baseSpec(), nil)
	if err != nil || host.Render() != policy.Compile(baseSpec()).Render() {
		t.Fatalf("host mode: %v", err)
	}
	if _, err := policy.CompileNamespace(sidecarSpec(), nil); err == nil {
		t.Fatal("sidecar mode compiled without the agent's identity")
	}
	sc, err := policy.CompileNamespace(sidecarSpec(), &policy.SidecarEnv{Agent: sidecarAgent, Endpoints: sidecarEndpoints})
	if err != nil || sc.Render() != compileSidecar(t, sidecarSpec(), sidecarAgent).Render() {
		t.Fatalf("sidecar mode: %v", err)
	}
	if sc.Name != host.Name {
		t.Fatalf("sidecar table %q, host mode %q: Apply must replace one with the other", sc.Name, host.Name)
	}
}
