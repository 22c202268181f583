package config

import (
	"strings"
	"testing"
)

// spec resolves a static config for the conflict tests: name, plus edits.
func conflictSpec(t *testing.T, name string, edit func(c *Config)) *Spec {
	t.Helper()
	c := &Config{Name: name, WireGuard: WireGuard{ConfigFile: "/run/secrets/" + name + ".conf"}}
	if edit != nil {
		edit(c)
	}
	s, err := Resolve(c, Options{Static: true})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

func hostLink(host, ns string, maps ...PortMapping) func(*Config) {
	return func(c *Config) {
		c.HostLink = HostLink{Enable: true, HostAddress: host, NamespaceAddress: ns, PortMappings: maps}
	}
}

func TestConflicts(t *testing.T) {
	cases := []struct {
		name  string
		a, b  func(*Config)
		nameB string
		want  []string // substrings of the one conflict line
	}{
		{"same name", nil, nil, "a",
			[]string{"a.json and b.json: name:", `both configure namespace "a"`, "own name"}},
		{"same interface", func(c *Config) { c.Interface = "wg0" }, func(c *Config) { c.Interface = "wg0" }, "b",
			[]string{"a.json and b.json: interface:", `"wg0"`, "distinct"}},
		{"interface is another's veth", hostLink("10.200.1.1/30", "10.200.1.2/30"), func(c *Config) { c.Interface = "vn-a" }, "b",
			[]string{"b.json and a.json: interface / hostLink:", `"vn-a" is the other's host-link veth`}},
		{"same host port", hostLink("10.200.1.1/30", "10.200.1.2/30", PortMapping{From: 8080, To: 80}),
			hostLink("10.200.2.1/30", "10.200.2.2/30", PortMapping{From: 8080, To: 81, Protocol: "both"}), "b",
			[]string{"a.json and b.json: hostLink.portMappings:", "host port tcp/8080", "one namespace only"}},
		{"mapping is another's listen port", func(c *Config) { c.WireGuard.ListenPort = 51820 },
			hostLink("10.200.2.1/30", "10.200.2.2/30", PortMapping{From: 51820, To: 80, Protocol: "udp"}), "b",
			[]string{"a.json and b.json: wireguard.listenPort / hostLink.portMappings:", "udp/51820"}},
		{"same subnet", hostLink("10.200.1.1/30", "10.200.1.2/30"), hostLink("10.200.1.1/30", "10.200.1.2/30"), "b",
			[]string{"a.json and b.json: hostLink.hostAddress:", "10.200.1.0/30 and 10.200.1.0/30 overlap", "10.200.N.1/30"}},
		{"overlapping subnet", hostLink("10.200.0.1/16", "10.200.0.2/16"), hostLink("10.200.7.5/30", "10.200.7.6/30"), "b",
			[]string{"hostLink.hostAddress:", "10.200.0.0/16 and 10.200.7.4/30 overlap"}},
		{"same metrics address", func(c *Config) { c.Metrics.Listen = "127.0.0.1:9586" }, func(c *Config) { c.Metrics.Listen = "127.0.0.1:9586" }, "b",
			[]string{"a.json and b.json: metrics.listen:", "both serve metrics on 127.0.0.1:9586"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			specs := []*Spec{conflictSpec(t, "a", tc.a), conflictSpec(t, tc.nameB, tc.b)}
			got := Conflicts(specs, []string{"a.json", "b.json"})
			if len(got) != 1 {
				t.Fatalf("want one conflict, got %d: %v", len(got), got)
			}
			line := got[0].Error()
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q lacks %q", line, w)
				}
			}
			if strings.Contains(line, "\n") {
				t.Errorf("not one line: %q", line)
			}
		})
	}
}

func TestNoConflicts(t *testing.T) {
	specs := []*Spec{
		conflictSpec(t, "a", hostLink("10.200.1.1/30", "10.200.1.2/30", PortMapping{From: 8080, To: 80})),
		conflictSpec(t, "b", hostLink("10.200.2.1/30", "10.200.2.2/30", PortMapping{From: 8080, To: 80, Protocol: "udp"})),
		conflictSpec(t, "c", func(c *Config) { c.WireGuard.ListenPort = 51820 }),
	}
	if got := Conflicts(specs, nil); len(got) != 0 {
		t.Errorf("want none, got %v", got)
	}
	// Without file names, the namespace names label the configs.
	specs = append(specs, conflictSpec(t, "d", func(c *Config) { c.WireGuard.ListenPort = 51820 }))
	if got := Conflicts(specs, nil); len(got) != 1 || !strings.HasPrefix(got[0].Error(), "c and d: ") {
		t.Errorf("got %v", got)
	}
}

func TestInterfaceIsOwnVeth(t *testing.T) {
	c := &Config{Name: "a", Interface: "vh-a", WireGuard: WireGuard{ConfigFile: "/run/a.conf"},
		HostLink: HostLink{Enable: true, HostAddress: "10.200.1.1/30", NamespaceAddress: "10.200.1.2/30"}}
	if _, err := Resolve(c, Options{Static: true}); err == nil || !strings.Contains(err.Error(), "interface:") {
		t.Errorf("got %v", err)
	}
}
