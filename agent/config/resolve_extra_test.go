package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
)

func TestSearchDomainsValidated(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		search []any
		field  string
		want   string
	}{
		{[]any{"corp.test\nnameserver 198.18.77.2"}, "dns.search[0]", "is not a domain name"},
		{[]any{"ok.test", "with space.test"}, "dns.search[1]", "is not a domain name"},
		{[]any{""}, "dns.search[0]", "is not a domain name"},
		{[]any{"a.t", "b.t", "c.t", "d.t", "e.t", "f.t", "g.t"}, "dns.search", "7 search domains"},
	} {
		m := f.structured()
		m["dns"].(map[string]any)["search"] = tc.search
		_, err := resolveJSON(t, m)
		wantErr(t, err, tc.field, tc.want)
	}
	m := f.structured()
	m["dns"].(map[string]any)["search"] = []any{"corp.example.", "lan"}
	s, err := resolveJSON(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s.DNSSearch) != "[corp.example lan]" {
		t.Errorf("search = %v", s.DNSSearch)
	}
}

func TestWgQuickErrorsNameTheFileLine(t *testing.T) {
	f := newFixture(t)
	p := filepath.Join(f.dir, "lines.conf")
	body := "[Interface]\nPrivateKey = " + f.priv.String() + "\nAddress = 10.2.0.2/32\nDNS = 10.2.0.1, 127.0.0.53\n\n" +
		"[Peer]\nPublicKey = " + f.pub.String() + "\nEndpoint = 198.51.100.1:51820\nAllowedIPs = 0.0.0.0/1\nAllowedIPs = 0.0.0.0/1\n"
	write(t, p, body, 0o600)
	cfg := map[string]any{"name": "proton", "wireguard": map[string]any{"configFile": p}}
	_, err := resolveJSON(t, cfg)
	wantErr(t, err, "wireguard.configFile", p+" line 10: AllowedIPs: 0.0.0.0/1 is also allowed for the [Peer] on line 6")

	write(t, p, body[:len(body)-len("AllowedIPs = 0.0.0.0/1\n")], 0o600)
	_, err = resolveJSON(t, cfg)
	wantErr(t, err, "wireguard.configFile", p+" line 9: AllowedIPs: the peers' allowedIPs do not cover the IPv4 default route", "split tunnels are refused")

	// Two lines that together still split: both are named.
	write(t, p, body[:len(body)-len("AllowedIPs = 0.0.0.0/1\n")]+"AllowedIPs = 128.0.0.0/2\n", 0o600)
	_, err = resolveJSON(t, cfg)
	wantErr(t, err, "wireguard.configFile", p+" lines 9, 10: AllowedIPs: the peers' allowedIPs do not cover the IPv4 default route")

	write(t, p, body[:len(body)-len("AllowedIPs = 0.0.0.0/1\nAllowedIPs = 0.0.0.0/1\n")]+"AllowedIPs = 0.0.0.0/0\n", 0o600)
	_, err = resolveJSON(t, cfg)
	wantErr(t, err, "wireguard.configFile", p+" line 4: DNS: 127.0.0.53 cannot be reached through the tunnel")

	// The same server given in the JSON is named by its JSON field.
	cfg["dns"] = map[string]any{"servers": []any{"10.2.0.1", "127.0.0.53"}}
	_, err = resolveJSON(t, cfg)
	wantErr(t, err, "dns.servers[1]", "127.0.0.53 cannot be reached")
}

func TestDuplicatePeerKey(t *testing.T) {
	f := newFixture(t)
	m := f.structured()
	w := m["wireguard"].(map[string]any)
	p0 := w["peers"].([]any)[0].(map[string]any)
	w["peers"] = []any{p0, map[string]any{"publicKey": p0["publicKey"], "endpoint": "198.51.100.2:51820", "allowedIPs": []any{"::/0"}}}
	_, err := resolveJSON(t, m)
	wantErr(t, err, "wireguard.peers[1].publicKey", "is the same public key as peers[0]")
}

func TestHostLinkAddressesRefused(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ host, ns, field, want string }{
		{"127.0.10.1/30", "127.0.10.2/30", "hostLink.hostAddress", "loopback"},
		{"169.254.7.1/30", "169.254.7.2/30", "hostLink.hostAddress", "link-local"},
		{"224.0.0.1/30", "224.0.0.2/30", "hostLink.hostAddress", "multicast"},
		{"10.200.1.1/30", "10.200.1.3/30", "hostLink.namespaceAddress", "broadcast address"},
		{"10.200.1.3/30", "10.200.1.2/30", "hostLink.hostAddress", "broadcast address"},
	} {
		m := f.structured()
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": tc.host, "namespaceAddress": tc.ns}
		_, err := resolveJSON(t, m)
		wantErr(t, err, tc.field, tc.want)
	}
}

func TestHostLinkOverlapsHostAddress(t *testing.T) {
	f := newFixture(t)
	m := f.structured()
	m["hostLink"] = map[string]any{"enable": true, "hostAddress": "192.168.1.201/30", "namespaceAddress": "192.168.1.202/30"}
	c := parseJSON(t, m)
	host := map[string][]netip.Prefix{
		"eth0":      {netip.MustParsePrefix("192.168.1.20/24")},
		"vh-proton": {netip.MustParsePrefix("192.168.1.201/30")},
	}
	opts := Options{HostPrefixes: func() (map[string][]netip.Prefix, error) { return host, nil }}
	_, err := Resolve(c, opts)
	wantErr(t, err, "hostLink.hostAddress", "overlaps 192.168.1.0/24 on the host's interface eth0")
	// The namespace's own veth (it is up already) is no conflict.
	delete(host, "eth0")
	if _, err := Resolve(c, opts); err != nil {
		t.Fatal(err)
	}
	// Build-time validation cannot know the host's addresses.
	host["eth0"] = []netip.Prefix{netip.MustParsePrefix("192.168.1.20/24")}
	if _, err := Resolve(c, Options{Static: true, HostPrefixes: opts.HostPrefixes}); err != nil {
		t.Fatal(err)
	}
}

func parseJSON(t *testing.T, v any) *Config {
	t.Helper()
	c, err := Parse(marshal(t, v))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
