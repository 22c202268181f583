package policy_test

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

var update = flag.Bool("update", false, "rewrite policy/testdata/*.nft from the current output")

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

// baseSpec is a resolved Spec as config.Resolve would return it: strict DNS,
// IPv4 only, no open ports, no host link.
func baseSpec() *config.Spec {
	return &config.Spec{
		Name:      "proton",
		Backend:   config.BackendAuto,
		Interface: "vc-proton",
		Addresses: []netip.Prefix{pfx("10.2.0.2/32")},
		MTU:       config.DefaultMTU,
		Peers: []config.PeerSpec{{
			Endpoint:   "198.51.100.1:51820",
			AllowedIPs: []netip.Prefix{pfx("0.0.0.0/0")},
		}},
		IPv6:    false,
		DNSMode: config.DNSStrict,
		DNS:     []netip.Addr{ip("10.2.0.1")},
	}
}

func ipv6Spec() *config.Spec {
	s := baseSpec()
	s.Name, s.Interface = "mull", "vc-mull"
	s.Addresses = []netip.Prefix{pfx("10.64.1.2/32"), pfx("fc00:bbbb:bbbb:bb01::1:2/128")}
	s.Peers[0].AllowedIPs = []netip.Prefix{pfx("0.0.0.0/0"), pfx("::/0")}
	s.IPv6 = true
	s.DNS = []netip.Addr{ip("10.64.0.1"), ip("fc00:bbbb:bbbb:bb01::1")}
	return s
}

func tunnelDNSSpec() *config.Spec {
	s := baseSpec()
	s.DNSMode = config.DNSTunnel
	s.DNS = nil
	return s
}

func openPortsSpec() *config.Spec {
	s := baseSpec()
	s.OpenTCP = []uint16{51413, 8080}
	s.OpenUDP = []uint16{51413}
	return s
}

func hostLinkSpec() *config.Spec {
	s := openPortsSpec()
	s.Name, s.Interface = "torrent", "vc-torrent"
	s.HostLink = &config.HostLinkSpec{
		HostIf:         "vh-torrent",
		NSIf:           "vn-torrent",
		HostAddr:       pfx("10.200.1.1/30"),
		NSAddr:         pfx("10.200.1.2/30"),
		AccessibleFrom: []netip.Prefix{pfx("192.168.1.0/24"), pfx("192.168.0.0/16"), pfx("172.16.5.7/32"), pfx("10.10.0.0/25"), pfx("10.10.0.128/25")},
		Mappings: []config.Mapping{
			{HostPort: 9091, NSPort: 9091, Proto: "tcp"},
			{HostPort: 8080, NSPort: 80, Proto: "tcp"},
			{HostPort: 6881, NSPort: 6881, Proto: "udp"},
		},
	}
	return s
}

// egressSpec is the host link with allowedEgress: a host service, a NAS's
// ports (a DNS port listed), a LAN of any protocol and a prefix that is
// not whole bytes.
func egressSpec() *config.Spec {
	s := hostLinkSpec()
	s.HostLink.AllowedEgress = []config.EgressSpec{
		{Dst: pfx("10.200.1.1/32"), Proto: "tcp", Ports: []uint16{8096}},
		{Dst: pfx("192.168.1.20/32"), Proto: "tcp", Ports: []uint16{53, 445}},
		{Dst: pfx("192.168.1.20/32"), Proto: "udp", Ports: []uint16{53}},
		{Dst: pfx("192.168.2.0/24")},
		{Dst: pfx("172.16.16.0/20"), Proto: "udp"},
	}
	return s
}

// portForwardSpec has port forwarding on: the forwarded-port sets and
// their rules, empty until a lease fills them.
func portForwardSpec() *config.Spec {
	s := openPortsSpec()
	s.PortForward = &config.PortForwardSpec{Gateway: ip("10.2.0.1"), Style: config.PortForwardProton, Protocols: []string{"tcp", "udp"}, Lifetime: time.Minute}
	return s
}

type goldenCase struct {
	name string
	spec func() *config.Spec
}

var goldenCases = []goldenCase{
	{"strict-dns-ipv4", baseSpec},
	{"ipv6-tunnelled", ipv6Spec},
	{"dns-tunnel-mode", tunnelDNSSpec},
	{"open-ports", openPortsSpec},
	{"host-link", hostLinkSpec},
	{"host-link-egress", egressSpec},
	{"port-forwarding", portForwardSpec},
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, tc.name+".nft", policy.Compile(tc.spec()).Render())
			if h := policy.CompileHost(tc.spec()); h != nil {
				golden(t, tc.name+".host.nft", h.Render())
			}
		})
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./policy -run TestGolden -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run with -update if intended):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff shows the first differing lines.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + itoa(i+1) + ":\n- " + wl + "\n+ " + gl
		}
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestCompileDeterministicAndPure(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec()
			before := tc.spec()
			a, b := policy.Compile(s), policy.Compile(s)
			if !reflect.DeepEqual(a, b) || a.Render() != b.Render() {
				t.Fatal("Compile is not deterministic")
			}
			if !reflect.DeepEqual(s, before) {
				t.Fatal("Compile modified its Spec")
			}
			ha, hb := policy.CompileHost(s), policy.CompileHost(s)
			if !reflect.DeepEqual(ha, hb) {
				t.Fatal("CompileHost is not deterministic")
			}
			if !reflect.DeepEqual(s, before) {
				t.Fatal("CompileHost modified its Spec")
			}
			// A Ruleset owns its data: changing it must not reach the
			// next Compile (no shared slices with the Spec or globals).
			for i := range a.Sets {
				for j := range a.Sets[i].Ports {
					a.Sets[i].Ports[j] = 1
				}
			}
			if c := policy.Compile(s); !reflect.DeepEqual(c, b) {
				t.Fatal("a Ruleset shares mutable data with the package or the Spec")
			}
		})
	}
}

func TestCompiledRulesetsValidate(t *testing.T) {
	for _, tc := range goldenCases {
		for _, r := range []*policy.Ruleset{policy.Compile(tc.spec()), policy.CompileHost(tc.spec())} {
			if r == nil {
				continue
			}
			if err := r.Validate(); err != nil {
				t.Errorf("%s %s: %v", tc.name, r.Name, err)
			}
			for _, c := range r.Chains {
				for _, rule := range c.Rules {
					if rule.Comment == "" {
						t.Errorf("%s: rule without comment: %s", tc.name, rule)
					}
				}
			}
			if txt := r.Render(); strings.Contains(txt, "flowtable") || strings.Contains(txt, " log") {
				t.Errorf("%s: flowtable or log in the ruleset", tc.name)
			}
		}
	}
}
