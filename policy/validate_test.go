package policy_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name   string
		change func(r *policy.Ruleset)
		want   string
	}{
		{"missing comment", func(r *policy.Ruleset) { r.Chains[0].Rules[0].Comment = "" }, "needs a comment"},
		{"quote in comment", func(r *policy.Ruleset) { r.Chains[0].Rules[0].Comment = `say "hi"` }, "cannot quote"},
		{"long comment", func(r *policy.Ruleset) { r.Chains[0].Rules[0].Comment = strings.Repeat("x", 129) }, "longer than"},
		{"unknown set", func(r *policy.Ruleset) {
			r.Chains[0].Rules[0].Exprs = []policy.Expr{policy.Addr{Set: "nope"}, policy.Accept}
		}, `no ipv4_addr set "nope"`},
		{"unknown counter", func(r *policy.Ruleset) {
			r.Chains[0].Rules[0].Exprs = []policy.Expr{policy.CounterRef{Name: "nope"}, policy.Drop}
		}, `no counter "nope"`},
		{"verdict not last", func(r *policy.Ruleset) {
			r.Chains[0].Rules[0].Exprs = []policy.Expr{policy.Accept, policy.Iface{Name: "lo"}}
		}, "must be last"},
		{"tcp reset without tcp", func(r *policy.Ruleset) {
			r.Chains[0].Rules[0].Exprs = []policy.Expr{policy.Reject{TCPReset: true}}
		}, "needs a TCP match"},
		{"prefix in a plain set", func(r *policy.Ruleset) {
			r.Set("dns4").Addrs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		}, "needs flags interval"},
		{"v6 in a v4 set", func(r *policy.Ruleset) {
			r.Set("dns4").Addrs = []netip.Prefix{netip.MustParsePrefix("fd00::1/128")}
		}, "does not fit"},
		{"overlapping interval", func(r *policy.Ruleset) {
			r.Set("accessible4").Addrs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16")}
		}, "overlaps"},
		{"unsorted ports", func(r *policy.Ruleset) { r.Set("dns_ports").Ports = []uint16{53, 53} }, "sorted and unique"},
		{"bad interface", func(r *policy.Ruleset) {
			r.Chains[0].Rules[0].Exprs = []policy.Expr{policy.Iface{Name: `a"b`}, policy.Accept}
		}, "not valid"},
		{"family", func(r *policy.Ruleset) { r.Family = "ip" }, "only"},
		{"goto a missing chain", func(r *policy.Ruleset) {
			r.Chains[0].Rules[0].Exprs = []policy.Expr{policy.Goto{Chain: "nope"}}
		}, `no regular chain "nope"`},
		{"goto a base chain", func(r *policy.Ruleset) {
			r.Chains[0].Rules[0].Exprs = []policy.Expr{policy.Goto{Chain: "input"}}
		}, `no regular chain "input"`},
		{"goto not last", func(r *policy.Ruleset) {
			r.Chains[0].Rules[0].Exprs = []policy.Expr{policy.Goto{Chain: "out_dns"}, policy.Accept}
		}, "must be last"},
		{"regular chain with a policy", func(r *policy.Ruleset) { r.Chain("out_tunnel").Policy = policy.PolicyAccept }, "no type, priority or policy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := policy.Compile(hostLinkSpec())
			tc.change(r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCompileShape(t *testing.T) {
	// Sets and counters exist whatever the Spec, so status and the
	// watchdog see a stable structure.
	a := policy.Compile(baseSpec())
	for _, spec := range []func() *config.Spec{hostLinkSpec, ipv6Spec, tunnelDNSSpec} {
		b := policy.Compile(spec())
		if len(a.Sets) != len(b.Sets) || len(a.Counters) != len(b.Counters) || len(a.Chains) != len(b.Chains) {
			t.Fatal("sets, counters or chains depend on the Spec")
		}
	}
	b := policy.Compile(hostLinkSpec())
	if policy.CompileHost(baseSpec()) != nil {
		t.Fatal("CompileHost without a host link must return nil")
	}
	// accessibleFrom is normalised: contained prefixes dropped, sorted.
	got := b.Set("accessible4").Addrs
	want := []string{"10.10.0.0/25", "10.10.0.128/25", "172.16.5.7/32", "192.168.0.0/16"}
	if len(got) != len(want) {
		t.Fatalf("accessible4 = %v, want %v", got, want)
	}
	for i := range got {
		if got[i].String() != want[i] {
			t.Fatalf("accessible4 = %v, want %v", got, want)
		}
	}
	// IPv6 blocked: after the tunnel and loopback rules, the base chains
	// drop IPv6, and the tunnel chains do so first; tunnelled: there is no
	// such rule.
	for c, first := range map[string]int{"input": 2, "output": 2, "in_tunnel": 0, "out_tunnel": 0} {
		if r := a.Chain(c).Rules[first]; r.Exprs[0] != (policy.NFProto{V6: true}) {
			t.Errorf("%s: rule %d is %s, want the IPv6 drop", c, first, r)
		}
		for _, r := range policy.Compile(ipv6Spec()).Chain(c).Rules {
			if len(r.Exprs) > 0 && r.Exprs[0] == (policy.NFProto{V6: true}) {
				t.Errorf("%s: IPv6 dropped although tunnelled: %s", c, r)
			}
		}
	}
}
