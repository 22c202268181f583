package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func genKey(t testing.TB) wgtypes.Key {
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fixture writes a wg-quick file and a key file (mode 0600) and returns a
// valid structured config and a valid file-based config.
type fixture struct {
	dir, keyFile, wgFile string
	priv, pub            wgtypes.Key
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{dir: t.TempDir(), priv: genKey(t), pub: genKey(t).PublicKey()}
	f.keyFile = filepath.Join(f.dir, "key")
	f.wgFile = filepath.Join(f.dir, "wg.conf")
	write(t, f.keyFile, f.priv.String()+"\n", 0o600)
	write(t, f.wgFile, "[Interface]\nPrivateKey = "+f.priv.String()+"\nAddress = 10.2.0.2/32\nDNS = 10.2.0.1\n\n[Peer]\nPublicKey = "+f.pub.String()+"\nEndpoint = 198.51.100.1:51820\nAllowedIPs = 0.0.0.0/0\n", 0o600)
	return f
}

// secondServer writes a pool's second server, nl.conf (address
// 10.3.0.7/32, its own keys, endpoint, and DNS = dns unless empty), and
// returns its path.
func (f *fixture) secondServer(t *testing.T, dns, endpoint string) string {
	t.Helper()
	if dns != "" {
		dns = "DNS = " + dns + "\n"
	}
	p := filepath.Join(f.dir, "nl.conf")
	write(t, p, "[Interface]\nPrivateKey = "+genKey(t).String()+"\nAddress = 10.3.0.7/32\n"+dns+"\n[Peer]\nPublicKey = "+genKey(t).PublicKey().String()+"\nEndpoint = "+endpoint+"\nAllowedIPs = 0.0.0.0/0\n", 0o600)
	return p
}

func write(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
}

func (f *fixture) structured() map[string]any {
	return map[string]any{
		"name": "proton",
		"wireguard": map[string]any{
			"privateKeyFile": f.keyFile,
			"addresses":      []any{"10.2.0.2/32"},
			"peers": []any{map[string]any{
				"publicKey": f.pub.String(), "endpoint": "198.51.100.1:51820", "allowedIPs": []any{"0.0.0.0/0"},
			}},
		},
		"dns": map[string]any{"servers": []any{"10.2.0.1"}},
	}
}

func resolveJSON(t *testing.T, v any) (*Spec, error) {
	t.Helper()
	c, err := Parse(marshal(t, v))
	if err != nil {
		return nil, err
	}
	return Resolve(c, Options{})
}

func TestMinimalWgQuickConfig(t *testing.T) {
	f := newFixture(t)
	s, err := resolveJSON(t, map[string]any{"name": "proton", "wireguard": map[string]any{"configFile": f.wgFile}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Interface != "vc-proton" || s.MTU != DefaultMTU || s.IPv6 || s.DNSMode != DNSStrict || len(s.DNS) != 1 || !s.KeysLoaded {
		t.Errorf("spec = %+v", s)
	}
	if s.PrivateKey != f.priv {
		t.Errorf("private key not loaded from the wg-quick file")
	}
	if strings.Contains(s.String(), f.priv.String()) {
		t.Errorf("Spec.String leaks the key")
	}
}

func TestStructuredConfig(t *testing.T) {
	f := newFixture(t)
	cfg := f.structured()
	cfg["hostLink"] = map[string]any{
		"enable": true, "hostAddress": "10.200.1.1/30", "namespaceAddress": "10.200.1.2/30",
		"accessibleFrom": []any{"192.168.1.0/24"},
		"portMappings":   []any{map[string]any{"from": 9091, "to": 9091, "protocol": "both"}},
	}
	cfg["openPorts"] = []any{map[string]any{"port": 51413, "protocol": "both"}}
	s, err := resolveJSON(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.HostLink == nil || len(s.HostLink.Mappings) != 2 || s.HostLink.HostIf != "vh-proton" {
		t.Errorf("host link = %+v", s.HostLink)
	}
	if len(s.OpenTCP) != 1 || len(s.OpenUDP) != 1 {
		t.Errorf("open ports = %v %v", s.OpenTCP, s.OpenUDP)
	}
}

func TestStaticSkipsSecrets(t *testing.T) {
	c, err := Parse([]byte(`{"name":"proton","wireguard":{"configFile":"/run/secrets/does-not-exist.conf"}}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Resolve(c, Options{Static: true})
	if err != nil {
		t.Fatalf("static resolve read a runtime secret: %v", err)
	}
	if s.KeysLoaded {
		t.Error("KeysLoaded set without reading keys")
	}
	if _, err := Resolve(c, Options{}); err == nil {
		t.Error("non-static resolve accepted a missing wg-quick file")
	}
	// The other secret files: none read, each path still checked.
	f := newFixture(t)
	for field, set := range map[string]func(m map[string]any, path string){
		"wireguard.privateKeyFile": func(m map[string]any, path string) { m["wireguard"].(map[string]any)["privateKeyFile"] = path },
		"wireguard.peers[0].presharedKeyFile": func(m map[string]any, path string) {
			m["wireguard"].(map[string]any)["peers"].([]any)[0].(map[string]any)["presharedKeyFile"] = path
		},
		"portForwarding.transmission.credentialsFile": func(m map[string]any, path string) {
			m["portForwarding"] = map[string]any{"natpmp": map[string]any{"gateway": "10.2.0.1"}, "transmission": map[string]any{"url": "http://127.0.0.1:9091/transmission/rpc", "credentialsFile": path, "user": "svc-not-on-the-build-host"}}
		},
	} {
		m := f.structured()
		set(m, "/run/secrets/does-not-exist")
		c := parseJSON(t, m)
		if s, err := Resolve(c, Options{Static: true}); err != nil || s.KeysLoaded || s.Peers[0].PresharedKey != nil {
			t.Errorf("%s: static resolve read a runtime secret: %v", field, err)
		}
		_, err := Resolve(c, Options{})
		wantErr(t, err, field, "/run/secrets/does-not-exist does not exist")
		set(m, "secrets/key")
		_, err = Resolve(parseJSON(t, m), Options{Static: true})
		wantErr(t, err, field, `"secrets/key" is relative`)
	}
}

func TestIPv6Auto(t *testing.T) {
	f := newFixture(t)
	cfg := f.structured()
	wg := cfg["wireguard"].(map[string]any)
	wg["addresses"] = []any{"10.2.0.2/32", "fd00:2::2/128"}
	s, err := resolveJSON(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.IPv6 {
		t.Error("auto tunnelled IPv6 although allowedIPs lack ::/0")
	}
	wg["peers"].([]any)[0].(map[string]any)["allowedIPs"] = []any{"0.0.0.0/0", "::/0"}
	if s, err = resolveJSON(t, cfg); err != nil || !s.IPv6 {
		t.Errorf("auto with ::/0: ipv6=%v err=%v", s != nil && s.IPv6, err)
	}
}

func TestAllowedIPsCoverage(t *testing.T) {
	for _, tc := range []struct {
		ips  []string
		v6   bool
		want bool
	}{
		{[]string{"0.0.0.0/0"}, false, true},
		{[]string{"0.0.0.0/1", "128.0.0.0/1"}, false, true},
		{[]string{"128.0.0.0/1", "0.0.0.0/1"}, false, true},
		{[]string{"0.0.0.0/1", "128.0.0.0/2"}, false, false},
		{[]string{"10.0.0.0/8"}, false, false},
		{[]string{"::/0"}, true, true},
		{[]string{"::/1", "8000::/1"}, true, true},
		{[]string{"::/0"}, false, false},
		{[]string{"0.0.0.0/0"}, true, false},
	} {
		var ps []netipPrefix
		for _, s := range tc.ips {
			ps = append(ps, mustPrefix(s))
		}
		if got := covers(ps, tc.v6); got != tc.want {
			t.Errorf("covers(%v, v6=%v) = %v", tc.ips, tc.v6, got)
		}
	}
}

// TestBadInput: every malformed config fails with a one-line error that
// names the field (and never echoes a key).
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	loose := filepath.Join(f.dir, "loose-key")
	write(t, loose, f.priv.String(), 0o644)
	looseWG := filepath.Join(f.dir, "loose.conf")
	data, _ := os.ReadFile(f.wgFile)
	write(t, looseWG, string(data), 0o640)
	badKey := filepath.Join(f.dir, "bad-key")
	write(t, badKey, f.priv.String()[:30], 0o600)
	badWG := filepath.Join(f.dir, "bad.conf")
	write(t, badWG, strings.Replace(string(data), "198.51.100.1:51820", "2001:db8::1:51820", 1), 0o600)

	type mut func(m map[string]any)
	wg := func(m map[string]any) map[string]any { return m["wireguard"].(map[string]any) }
	peer := func(m map[string]any) map[string]any { return wg(m)["peers"].([]any)[0].(map[string]any) }
	hostLink := func(m map[string]any) map[string]any {
		h := map[string]any{"enable": true, "hostAddress": "10.200.1.1/30", "namespaceAddress": "10.200.1.2/30"}
		m["hostLink"] = h
		return h
	}
	sidecar := func(m map[string]any) map[string]any {
		v := map[string]any{}
		m["sidecar"] = v
		return v
	}
	clusterDNS := func(m map[string]any, allowed string, dns map[string]any) {
		v := sidecar(m)
		v["allowedSubnets"], v["clusterDNS"] = []any{allowed}, dns
	}
	for _, tc := range []struct {
		name, field string
		m           mut
	}{
		{"no name", "name", func(m map[string]any) { delete(m, "name") }},
		{"name too long", "name", func(m map[string]any) { m["name"] = "thisnameistoolong" }},
		{"name with slash", "name", func(m map[string]any) { m["name"] = "a/b" }},
		{"name with dotdot", "name", func(m map[string]any) { m["name"] = "..a" }},
		{"name uppercase", "name", func(m map[string]any) { m["name"] = "Proton" }},
		{"name starts with digit", "name", func(m map[string]any) { m["name"] = "1vpn" }},
		{"16-char interface", "interface", func(m map[string]any) { m["interface"] = "abcdefghijklmnop" }},
		{"interface dotdot", "interface", func(m map[string]any) { m["interface"] = ".." }},
		{"interface slash", "interface", func(m map[string]any) { m["interface"] = "wg/0" }},
		{"unknown backend", "backend", func(m map[string]any) { m["backend"] = "magic" }},
		{"unknown top-level field", "bogus", func(m map[string]any) { m["bogus"] = 1 }},
		{"unknown nested field", "privateKey", func(m map[string]any) { wg(m)["privateKey"] = "x" }},
		{"wrong type", "wireguard.mtu", func(m map[string]any) { wg(m)["mtu"] = "big" }},
		{"no tunnel", "wireguard", func(m map[string]any) { m["wireguard"] = map[string]any{} }},
		{"key file mode 0644", "wireguard.privateKeyFile", func(m map[string]any) { wg(m)["privateKeyFile"] = loose }},
		{"wg-quick file mode 0640", "wireguard.configFile", func(m map[string]any) { m["wireguard"] = map[string]any{"configFile": looseWG} }},
		{"missing key file", "wireguard.privateKeyFile", func(m map[string]any) { wg(m)["privateKeyFile"] = f.dir + "/nope" }},
		{"relative key path", "wireguard.privateKeyFile", func(m map[string]any) { wg(m)["privateKeyFile"] = "key" }},
		{"key in nix store", "wireguard.privateKeyFile", func(m map[string]any) { wg(m)["privateKeyFile"] = "/nix/store/abc-key" }},
		{"truncated key file", "wireguard.privateKeyFile", func(m map[string]any) { wg(m)["privateKeyFile"] = badKey }},
		{"malformed wg-quick", "wireguard.configFile", func(m map[string]any) { m["wireguard"] = map[string]any{"configFile": badWG} }},
		{"bad address", "wireguard.addresses[0]", func(m map[string]any) { wg(m)["addresses"] = []any{"10.2.0.256/32"} }},
		{"overlapping addresses", "wireguard.addresses", func(m map[string]any) { wg(m)["addresses"] = []any{"10.2.0.0/24", "10.2.0.2/32"} }},
		{"mtu too small", "wireguard.mtu", func(m map[string]any) { wg(m)["mtu"] = 500 }},
		{"mtu below the IPv6 minimum", "wireguard.mtu", func(m map[string]any) {
			wg(m)["mtu"] = 1200
			wg(m)["addresses"] = []any{"10.2.0.2/32", "fd00::2/128"}
			peer(m)["allowedIPs"] = []any{"0.0.0.0/0", "::/0"}
		}},
		{"listen port too big", "wireguard.listenPort", func(m map[string]any) { wg(m)["listenPort"] = 70000 }},
		{"truncated public key", "wireguard.peers[0].publicKey", func(m map[string]any) { peer(m)["publicKey"] = f.pub.String()[:40] }},
		{"ipv6 endpoint without brackets", "wireguard.peers[0].endpoint", func(m map[string]any) { peer(m)["endpoint"] = "2001:db8::1:51820" }},
		{"endpoint without port", "wireguard.peers[0].endpoint", func(m map[string]any) { peer(m)["endpoint"] = "198.51.100.1" }},
		{"bad allowed ip", "wireguard.peers[0].allowedIPs[0]", func(m map[string]any) { peer(m)["allowedIPs"] = []any{"0.0.0.0/40"} }},
		{"allowed ips miss default route", "allowedIPs", func(m map[string]any) { peer(m)["allowedIPs"] = []any{"10.0.0.0/8"} }},
		{"negative keepalive", "wireguard.peers[0].persistentKeepalive", func(m map[string]any) { peer(m)["persistentKeepalive"] = -1 }},
		{"unknown ipv6 mode", "ipv6", func(m map[string]any) { m["ipv6"] = "maybe" }},
		{"ipv6 tunnel without v6 address", "ipv6", func(m map[string]any) { m["ipv6"] = "tunnel" }},
		{"bad dns server", "dns.servers[0]", func(m map[string]any) { m["dns"] = map[string]any{"servers": []any{"dns.example"}} }},
		{"loopback dns server", "dns.servers[0]", func(m map[string]any) { m["dns"] = map[string]any{"servers": []any{"127.0.0.53"}} }},
		{"v6 dns with v6 blocked", "dns.servers[0]", func(m map[string]any) { m["dns"] = map[string]any{"servers": []any{"fd00::1"}} }},
		{"no dns in strict mode", "dns.servers", func(m map[string]any) { delete(m, "dns") }},
		{"unknown dns mode", "dns.mode", func(m map[string]any) { m["dns"] = map[string]any{"mode": "open"} }},
		{"duplicate open port", "openPorts[1]", func(m map[string]any) {
			m["openPorts"] = []any{map[string]any{"port": 1000}, map[string]any{"port": 1000, "protocol": "tcp"}}
		}},
		{"open port zero", "openPorts[0].port", func(m map[string]any) { m["openPorts"] = []any{map[string]any{"port": 0}} }},
		{"bad protocol", "openPorts[0].protocol", func(m map[string]any) { m["openPorts"] = []any{map[string]any{"port": 1, "protocol": "sctp"}} }},
		{"mappings without host link", "hostLink.enable", func(m map[string]any) {
			m["hostLink"] = map[string]any{"portMappings": []any{map[string]any{"from": 1, "to": 1}}}
		}},
		{"host link missing address", "hostLink.hostAddress", func(m map[string]any) { delete(hostLink(m), "hostAddress") }},
		{"host link different subnets", "hostLink.namespaceAddress", func(m map[string]any) { hostLink(m)["namespaceAddress"] = "10.201.1.2/30" }},
		{"host link same address", "hostLink.namespaceAddress", func(m map[string]any) { hostLink(m)["namespaceAddress"] = "10.200.1.1/30" }},
		{"host link network address", "hostLink.hostAddress", func(m map[string]any) { hostLink(m)["hostAddress"] = "10.200.1.0/30" }},
		{"host link overlaps tunnel", "hostLink.hostAddress", func(m map[string]any) {
			h := hostLink(m)
			h["hostAddress"], h["namespaceAddress"] = "10.2.0.1/24", "10.2.0.3/24"
		}},
		{"accessibleFrom everything", "hostLink.accessibleFrom[0]", func(m map[string]any) { hostLink(m)["accessibleFrom"] = []any{"0.0.0.0/0"} }},
		{"accessibleFrom contains dns", "hostLink.accessibleFrom[0]", func(m map[string]any) { hostLink(m)["accessibleFrom"] = []any{"10.2.0.0/16"} }},
		{"accessibleFrom contains endpoint", "hostLink.accessibleFrom[0]", func(m map[string]any) { hostLink(m)["accessibleFrom"] = []any{"198.51.100.0/24"} }},
		{"accessibleFrom ipv6", "hostLink.accessibleFrom[0]", func(m map[string]any) { hostLink(m)["accessibleFrom"] = []any{"fd00::/64"} }},
		{"host port mapped twice", "hostLink.portMappings[1].from", func(m map[string]any) {
			hostLink(m)["portMappings"] = []any{map[string]any{"from": 8080, "to": 80}, map[string]any{"from": 8080, "to": 81}}
		}},
		{"mapping port out of range", "hostLink.portMappings[0].to", func(m map[string]any) {
			hostLink(m)["portMappings"] = []any{map[string]any{"from": 8080, "to": 0}}
		}},
		{"mapping on wireguard port", "hostLink.portMappings[0].from", func(m map[string]any) {
			wg(m)["listenPort"] = 51820
			hostLink(m)["portMappings"] = []any{map[string]any{"from": 51820, "to": 80, "protocol": "udp"}}
		}},
		{"sidecar with a host link", "hostLink.enable", func(m map[string]any) { sidecar(m); hostLink(m) }},
		{"sidecar default route", "sidecar.allowedSubnets[1]", func(m map[string]any) {
			sidecar(m)["allowedSubnets"] = []any{"10.42.0.0/16", "0.0.0.0/0"}
		}},
		{"sidecar ipv6 default route", "sidecar.allowedSubnets[0]", func(m map[string]any) { sidecar(m)["allowedSubnets"] = []any{"::/0"} }},
		{"sidecar ipv6 subnet", "sidecar.allowedSubnets[0]", func(m map[string]any) { sidecar(m)["allowedSubnets"] = []any{"fd00::/8"} }},
		{"sidecar subnet not a cidr", "sidecar.allowedSubnets[0]", func(m map[string]any) { sidecar(m)["allowedSubnets"] = []any{"cluster"} }},
		{"sidecar subnet holds the endpoint", "sidecar.allowedSubnets[0]", func(m map[string]any) { sidecar(m)["allowedSubnets"] = []any{"198.51.100.0/24"} }},
		{"sidecar subnet holds the tunnel", "sidecar.allowedSubnets[0]", func(m map[string]any) { sidecar(m)["allowedSubnets"] = []any{"10.0.0.0/8"} }},
		{"sidecar cluster dns outside allowedSubnets", "sidecar.clusterDNS.server", func(m map[string]any) {
			clusterDNS(m, "10.42.0.0/16", map[string]any{"server": "10.43.0.10", "domains": []any{"cluster.local"}})
		}},
		{"sidecar cluster dns not an address", "sidecar.clusterDNS.server", func(m map[string]any) {
			clusterDNS(m, "10.42.0.0/16", map[string]any{"server": "kube-dns", "domains": []any{"cluster.local"}})
		}},
		{"sidecar cluster dns without domains", "sidecar.clusterDNS.domains", func(m map[string]any) {
			clusterDNS(m, "10.43.0.0/16", map[string]any{"server": "10.43.0.10"})
		}},
		{"sidecar cluster dns bad domain", "sidecar.clusterDNS.domains[1]", func(m map[string]any) {
			clusterDNS(m, "10.43.0.0/16", map[string]any{"server": "10.43.0.10", "domains": []any{"cluster.local", "-bad..name"}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := f.structured()
			tc.m(m)
			_, err := resolveJSON(t, m)
			if err == nil {
				t.Fatal("accepted")
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a FieldError: %v", err, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field) {
				t.Errorf("error %q does not name field %q", msg, tc.field)
			}
			if fe.Fix == "" && !strings.Contains(msg, ";") {
				t.Errorf("error %q gives no fix", msg)
			}
			if strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error is not one line: %q", msg)
			}
			if strings.Contains(msg, f.priv.String()) || strings.Contains(msg, f.priv.String()[:30]) {
				t.Errorf("error echoes the private key: %q", msg)
			}
		})
	}
}

func TestParseJSONErrors(t *testing.T) {
	for in, want := range map[string]string{
		``:                             "empty",
		`{`:                            "config",
		`{"name": 5}`:                  "name",
		`{"name":"a"} {"name":"b"}`:    "trailing data",
		`{"name":"a","extra":true}`:    "extra",
		"\xef\xbb\xbf{\"name\":\"a\"}": "",
	} {
		_, err := Parse([]byte(in))
		if want == "" {
			if err != nil {
				t.Errorf("Parse(BOM + JSON): %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

func FuzzConfig(f *testing.F) {
	f.Add([]byte(`{"name":"proton","wireguard":{"configFile":"/run/secrets/p.conf"}}`))
	f.Add([]byte(`{"name":"a","wireguard":{"privateKeyFile":"/k","addresses":["10.0.0.2/32"],"peers":[{"publicKey":"x","endpoint":"[::1]:1","allowedIPs":["0.0.0.0/0"]}]},"hostLink":{"enable":true,"hostAddress":"10.9.0.1/30","namespaceAddress":"10.9.0.2/30","accessibleFrom":["192.168.0.0/16"],"portMappings":[{"from":1,"to":2,"protocol":"both"}]}}`))
	f.Add([]byte(`{"name":"t","wireguard":{"configFile":"/run/secrets/p.conf"},"portForwarding":{"natpmp":{"gateway":"10.2.0.1","style":"rfc","internalPort":6881,"protocol":"tcp","lifetime":"90s"},"transmission":{"url":"http://127.0.0.1:9091/transmission/rpc","credentialsFile":"/run/secrets/tr","user":"debian-transmission"},"qbittorrent":{"url":"http://127.0.0.1:8080"},"onChange":["/bin/true","x"]}}`))
	// Issue 21.5: names in another case (encoding/json would take them).
	f.Add([]byte(`{"name":"proton","wireGuard":{"configfile":"/run/secrets/p.conf"},"DNS":{"Mode":"tunnel"}}`))
	f.Add([]byte(`{"name":"a","wireguard":{"configFile":"/p"},"openPorts":[{"port":1,"Protocol":"tcp"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		// Whatever was accepted spells each field name exactly as some
		// json tag of the Config's types does.
		if bad := inexactKey(t, data); bad != "" {
			t.Fatalf("accepted the field name %q, which is no field's exact spelling", bad)
		}
		s, err := Resolve(c, Options{Static: true})
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if ValidateName(s.Name) != nil || len(s.Interface) > 15 {
			t.Fatalf("accepted unsafe names %q/%q", s.Name, s.Interface)
		}
	})
}

// inexactKey returns an object key of JSON data that is not exactly the
// json name of any field of any type the Config holds ("" if none).
func inexactKey(t *testing.T, data []byte) string {
	names := map[string]bool{}
	seen := map[reflect.Type]bool{}
	var collect func(reflect.Type)
	collect = func(rt reflect.Type) {
		for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice || rt.Kind() == reflect.Map {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct || seen[rt] {
			return
		}
		seen[rt] = true
		for i := range rt.NumField() {
			n, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			names[n] = true
			collect(rt.Field(i).Type)
		}
	}
	collect(reflect.TypeFor[Config]())
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))))
	var stack []bool // per open container: is it an object
	key := true
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				stack = append(stack, tok == '{')
				key = tok == '{'
				continue
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if len(stack) > 0 && stack[len(stack)-1] && key {
				if !names[tok] {
					return tok
				}
				key = false
				continue
			}
		}
		key = len(stack) > 0 && stack[len(stack)-1]
	}
}

// A small underlay (the privacy VM test: uplink MTU 1300) needs a
// WireGuard MTU below IPv6's minimum; with IPv6 blocked that is fine.
func TestSmallMTUWithIPv4Only(t *testing.T) {
	f := newFixture(t)
	cfg := f.structured()
	cfg["wireguard"].(map[string]any)["mtu"] = 1200
	s, err := resolveJSON(t, cfg)
	if err != nil || s.MTU != 1200 {
		t.Fatalf("mtu 1200 with IPv4 only: %v", err)
	}
}
