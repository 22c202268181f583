package policy_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

func TestCompilePin(t *testing.T) {
	s := &config.Spec{Name: "proton"}
	eps := []netip.AddrPort{
		netip.MustParseAddrPort("198.51.100.7:51820"),
		netip.MustParseAddrPort("[::ffff:198.51.100.8]:1194"),
		netip.MustParseAddrPort("[2001:db8::9]:51820"),
	}
	r, err := policy.CompilePin(s, policy.PinEnv{Mark: 0x7663, Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "vpnc_pin-proton" {
		t.Errorf("table %q", r.Name)
	}
	text := r.Render()
	for _, want := range []string{
		"elements = { 198.51.100.7, 198.51.100.8 }",
		"elements = { 2001:db8::9 }",
		"elements = { 1194, 51820 }",
		"type filter hook output priority filter; policy accept;",
		`meta mark 0x00007663 ip daddr @pin4 udp dport @pin_ports accept`,
		`meta mark 0x00007663 counter name "pin_drop" drop`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered pin table lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "socket cgroupv2") {
		t.Errorf("the kernel backend's packets carry no socket, yet the table matches one:\n%s", text)
	}

	u, err := policy.CompilePin(s, policy.PinEnv{Mark: 0x7663, Agent: &policy.AgentSocket{CgroupID: 4242, Level: 2}, Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	if text := u.Render(); !strings.Contains(text, `meta mark 0x00007663 socket cgroupv2 level 2 4242 counter name "pin_drop" drop`) {
		t.Errorf("userspace pin table does not key on the mark and the agent's cgroup:\n%s", text)
	}
	// Level unknown: one set of rules per level, as the sidecar table.
	if u, err := policy.CompilePin(s, policy.PinEnv{Mark: 1, Agent: &policy.AgentSocket{CgroupID: 4242}, Endpoints: eps}); err != nil || u.RuleCount() != 3*policy.MaxCgroupLevel {
		t.Errorf("level unknown: %v, %d rules", err, u.RuleCount())
	}

	for _, c := range []struct {
		name string
		env  policy.PinEnv
		want string
	}{
		{"no mark", policy.PinEnv{Endpoints: eps}, "no firewall mark"},
		{"no endpoint", policy.PinEnv{Mark: 1}, "no endpoint"},
		{"no port", policy.PinEnv{Mark: 1, Endpoints: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), 0)}}, "no address or port"},
		{"root cgroup", policy.PinEnv{Mark: 1, Agent: &policy.AgentSocket{CgroupID: 1}, Endpoints: eps}, "root cgroup"},
	} {
		if _, err := policy.CompilePin(s, c.env); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
