package badinput

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wgQuick returns a valid provider file.
func wgQuick(k keys) string {
	return "[Interface]\nPrivateKey = " + k.priv + "\nAddress = 10.2.0.2/32\nDNS = 10.2.0.1\n\n" +
		"[Peer]\nPublicKey = " + k.pub + "\nEndpoint = 192.0.2.1:51820\nAllowedIPs = 0.0.0.0/0\n"
}

type fileCase struct {
	name, field string
	mode        os.FileMode
	edit        func(k keys, s string) string
}

func rep(old, new string) func(keys, string) string {
	return func(_ keys, s string) string { return strings.Replace(s, old, new, 1) }
}

// asIs leaves the wg-quick file as it is.
func asIs(_ keys, s string) string { return s }

var wgQuickCases = []fileCase{
	{"truncated private key", "PrivateKey", 0o600, func(k keys, s string) string { return strings.Replace(s, k.priv, k.priv[:30], 1) }},
	{"truncated public key", "PublicKey", 0o600, func(k keys, s string) string { return strings.Replace(s, k.pub, k.pub[:43], 1) }},
	{"crlf with truncated key", "PrivateKey", 0o600, func(k keys, s string) string {
		return strings.ReplaceAll(strings.Replace(s, k.priv, k.priv[:20], 1), "\n", "\r\n")
	}},
	{"bom with unknown key", "line 4: unknown key in [Interface]", 0o600, func(_ keys, s string) string {
		return "\xef\xbb\xbf" + strings.Replace(s, "DNS", "Colour = blue\nDNS", 1)
	}},
	{"duplicate interface section", "duplicate [Interface]", 0o600, func(_ keys, s string) string { return s + "[Interface]\nAddress = 10.3.0.2/32\n" }},
	{"duplicate peer section", "repeats the public key", 0o600, func(_ keys, s string) string { return s + s[strings.Index(s, "[Peer]"):] }},
	{"unknown interface key", "unknown key in [Interface]", 0o600, rep("DNS", "Foo = 1\nDNS")},
	{"unknown peer key", "unknown key in [Peer]", 0o600, func(_ keys, s string) string { return s + "Bar = 2\n" }},
	{"ipv6 endpoint without brackets", "needs brackets", 0o600, rep("192.0.2.1:51820", "2001:db8::1:51820")},
	{"endpoint without port", "no port", 0o600, rep("192.0.2.1:51820", "192.0.2.1")},
	{"endpoint bad port", "out of range", 0o600, rep(":51820", ":99999")},
	{"allowed ips miss default route", "wg.conf line 9: AllowedIPs: the peers' allowedIPs do not cover the IPv4 default route", 0o600, rep("AllowedIPs = 0.0.0.0/0", "AllowedIPs = 10.0.0.0/8")},
	{"bad allowed ip", "AllowedIPs", 0o600, rep("0.0.0.0/0", "0.0.0.0/99")},
	{"bad address", "Address", 0o600, rep("10.2.0.2/32", "10.2.0.2/40")},
	{"missing address", "Address: missing", 0o600, rep("Address = 10.2.0.2/32\n", "")},
	{"missing private key", "PrivateKey: missing", 0o600, func(k keys, s string) string { return strings.Replace(s, "PrivateKey = "+k.priv+"\n", "", 1) }},
	{"no peer", "no [Peer]", 0o600, func(_ keys, s string) string { return s[:strings.Index(s, "[Peer]")] }},
	{"peer without public key", "no PublicKey", 0o600, func(k keys, s string) string { return strings.Replace(s, "PublicKey = "+k.pub+"\n", "", 1) }},
	{"mtu not a number", "MTU", 0o600, rep("DNS", "MTU = large\nDNS")},
	{"fwmark garbage", "FwMark", 0o600, rep("DNS", "FwMark = 0xnope\nDNS")},
	{"keepalive garbage", "PersistentKeepalive", 0o600, func(_ keys, s string) string { return s + "PersistentKeepalive = often\n" }},
	{"key outside section", "outside any section", 0o600, func(_ keys, s string) string { return "MTU = 1400\n" + s }},
	{"unknown section", "unknown section", 0o600, func(_ keys, s string) string { return s + "[Server]\n" }},
	{"binary garbage", "control character", 0o600, func(_ keys, s string) string { return "\x00\x01\x02" + s }},
	{"wg-quick file mode 0644", "chmod 600", 0o644, asIs},
	{"wg-quick file mode 0640", "chmod 600", 0o640, asIs},
	{"empty file", "no [Interface]", 0o600, func(_ keys, s string) string { return "" }},
	// Issue 12: values from the file are reported by its line, and nothing
	// read from it is echoed (a key typed with ':' is not a key name).
	{"dns on loopback names the file line", "line 4: DNS: 127.0.0.53 cannot be reached", 0o600, rep("DNS = 10.2.0.1", "DNS = 127.0.0.53")},
	{"key typed with a colon", "line 2: unknown key in [Interface]", 0o600, rep("PrivateKey = ", "PrivateKey: ")},
	{"too many search domains", "7 search domains", 0o600, rep("DNS = 10.2.0.1", "DNS = 10.2.0.1, a.t, b.t, c.t, d.t, e.t, f.t, g.t")},
}

type jsonCase struct {
	name, field string
	edit        func(m map[string]any, dir string, k keys)
}

var jsonCases = []jsonCase{
	{"name too long", "name", func(m map[string]any, _ string, _ keys) { m["name"] = "averyverylongname" }},
	{"name with slash", "name", func(m map[string]any, _ string, _ keys) { m["name"] = "a/b" }},
	{"name with dotdot", "name", func(m map[string]any, _ string, _ keys) { m["name"] = "../x" }},
	{"16-character interface name", "interface", func(m map[string]any, _ string, _ keys) { m["interface"] = "wg-sixteen-chars" }},
	{"interface with slash", "interface", func(m map[string]any, _ string, _ keys) { m["interface"] = "wg/0" }},
	{"unknown field", "colour", func(m map[string]any, _ string, _ keys) { m["colour"] = "blue" }},
	{"unknown backend", "backend", func(m map[string]any, _ string, _ keys) { m["backend"] = "fast" }},
	{"sidecar default route", "sidecar.allowedSubnets[0]", func(m map[string]any, _ string, _ keys) {
		m["sidecar"] = map[string]any{"allowedSubnets": []any{"0.0.0.0/0"}}
	}},
	{"sidecar cluster dns outside allowed subnets", "sidecar.clusterDNS.server", func(m map[string]any, _ string, _ keys) {
		m["sidecar"] = map[string]any{"allowedSubnets": []any{"10.42.0.0/16"}, "clusterDNS": map[string]any{"server": "10.43.0.10", "domains": []any{"cluster.local"}}}
	}},
	{"sidecar with host link", "hostLink.enable", func(m map[string]any, _ string, _ keys) {
		m["sidecar"] = map[string]any{}
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": "10.200.1.1/30", "namespaceAddress": "10.200.1.2/30"}
	}},
	{"no tunnel", "wireguard", func(m map[string]any, _ string, _ keys) { m["wireguard"] = map[string]any{} }},
	{"missing wg-quick file", "wireguard.configFile", func(m map[string]any, dir string, _ keys) {
		m["wireguard"] = map[string]any{"configFile": filepath.Join(dir, "nope.conf")}
	}},
	{"relative wg-quick path", "wireguard.configFile", func(m map[string]any, _ string, _ keys) { m["wireguard"] = map[string]any{"configFile": "wg.conf"} }},
	{"private key file mode 0644", "wireguard.privateKeyFile", func(m map[string]any, dir string, k keys) {
		p := filepath.Join(dir, "loose.key")
		os.WriteFile(p, []byte(k.priv), 0o644)
		os.Chmod(p, 0o644)
		m["wireguard"].(map[string]any)["privateKeyFile"] = p
		m["wireguard"].(map[string]any)["addresses"] = []any{"10.2.0.2/32"}
	}},
	{"overlapping addresses", "wireguard.addresses", func(m map[string]any, _ string, _ keys) {
		m["wireguard"].(map[string]any)["addresses"] = []any{"10.2.0.0/24", "10.2.0.9/32"}
	}},
	{"host link overlaps tunnel", "hostLink.hostAddress", func(m map[string]any, _ string, _ keys) {
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": "10.2.0.1/24", "namespaceAddress": "10.2.0.9/24"}
	}},
	{"host link subnets differ", "hostLink.namespaceAddress", func(m map[string]any, _ string, _ keys) {
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": "10.200.0.1/30", "namespaceAddress": "10.201.0.2/30"}
	}},
	{"duplicate open port", "openPorts[1]", func(m map[string]any, _ string, _ keys) {
		m["openPorts"] = []any{map[string]any{"port": 51413}, map[string]any{"port": 51413}}
	}},
	{"invalid open port", "openPorts[0].port", func(m map[string]any, _ string, _ keys) { m["openPorts"] = []any{map[string]any{"port": 70000}} }},
	{"host port mapped twice", "hostLink.portMappings[1].from", func(m map[string]any, _ string, _ keys) {
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": "10.200.0.1/30", "namespaceAddress": "10.200.0.2/30",
			"portMappings": []any{map[string]any{"from": 8080, "to": 80}, map[string]any{"from": 8080, "to": 81}}}
	}},
	{"accessibleFrom the whole internet", "hostLink.accessibleFrom[0]", func(m map[string]any, _ string, _ keys) {
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": "10.200.0.1/30", "namespaceAddress": "10.200.0.2/30", "accessibleFrom": []any{"0.0.0.0/0"}}
	}},
	{"bad dns server", "dns.servers[0]", func(m map[string]any, _ string, _ keys) {
		m["dns"] = map[string]any{"servers": []any{"resolver.example"}}
	}},
	{"ipv6 tunnel without v6 address", "ipv6", func(m map[string]any, _ string, _ keys) { m["ipv6"] = "tunnel" }},
	{"mtu out of range", "wireguard.mtu", func(m map[string]any, _ string, _ keys) { m["wireguard"].(map[string]any)["mtu"] = 100 }},
	{"wrong json type", "name", func(m map[string]any, _ string, _ keys) { m["name"] = 42 }},
	// Issue 12.
	{"search domain smuggling a nameserver", "dns.search[0]", func(m map[string]any, _ string, _ keys) {
		m["dns"] = map[string]any{"search": []any{"corp.test\nnameserver 198.18.77.2"}}
	}},
	{"wg-quick file owned by nobody", "owned by uid 65534", func(m map[string]any, dir string, _ keys) {
		os.Chown(filepath.Join(dir, "wg.conf"), 65534, 65534)
	}},
	{"wg-quick file through a link nobody owns", "symbolic link", func(m map[string]any, dir string, _ keys) {
		link := filepath.Join(dir, "evil.conf")
		os.Symlink(filepath.Join(dir, "wg.conf"), link)
		os.Lchown(link, 65534, 65534)
		m["wireguard"] = map[string]any{"configFile": link}
	}},
	{"host link on loopback", "hostLink.hostAddress", func(m map[string]any, _ string, _ keys) {
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": "127.0.10.1/30", "namespaceAddress": "127.0.10.2/30"}
	}},
	{"host link on link-local", "hostLink.hostAddress", func(m map[string]any, _ string, _ keys) {
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": "169.254.7.1/30", "namespaceAddress": "169.254.7.2/30"}
	}},
	{"host link broadcast address", "hostLink.namespaceAddress", func(m map[string]any, _ string, _ keys) {
		m["hostLink"] = map[string]any{"enable": true, "hostAddress": "10.200.0.1/30", "namespaceAddress": "10.200.0.3/30"}
	}},
	// Issue 15: the userspace data plane's packet bound.
	{"packet buffers below the minimum", "memory.packetBuffers: 10 is out of range; use 64–65536, or 0 for unbounded", func(m map[string]any, _ string, _ keys) {
		m["memory"] = map[string]any{"packetBuffers": 10}
	}},
	{"negative packet buffers", "memory.packetBuffers: -1 is out of range", func(m map[string]any, _ string, _ keys) {
		m["memory"] = map[string]any{"packetBuffers": -1}
	}},
	{"packet buffers above the maximum", "memory.packetBuffers: 65537 is out of range", func(m map[string]any, _ string, _ keys) {
		m["memory"] = map[string]any{"packetBuffers": 65537}
	}},
	{"packet buffers as a string", "memory.packetBuffers", func(m map[string]any, _ string, _ keys) {
		m["memory"] = map[string]any{"packetBuffers": "256"}
	}},
	{"unknown memory field", "limit: unknown field", func(m map[string]any, _ string, _ keys) {
		m["memory"] = map[string]any{"limit": "64MiB"}
	}},
	{"duplicate peer key", "wireguard.peers[1].publicKey", func(m map[string]any, _ string, k keys) {
		p := map[string]any{"publicKey": k.pub, "endpoint": "192.0.2.1:51820", "allowedIPs": []any{"0.0.0.0/0"}}
		q := map[string]any{"publicKey": k.pub, "endpoint": "192.0.2.2:51820", "allowedIPs": []any{"::/0"}}
		m["wireguard"].(map[string]any)["peers"] = []any{p, q}
	}},
	// Issue 14: port forwarding.
	{"port forwarding without natpmp", "portForwarding.natpmp", func(m map[string]any, _ string, _ keys) {
		m["portForwarding"] = map[string]any{"onChange": []any{"/bin/true"}}
	}},
	{"natpmp gateway IPv6", "portForwarding.natpmp.gateway", func(m map[string]any, _ string, _ keys) {
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{"gateway": "fd00::1"}}
	}},
	{"natpmp rfc without internal port", "portForwarding.natpmp.internalPort", func(m map[string]any, _ string, _ keys) {
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{"style": "rfc"}}
	}},
	{"natpmp lifetime too short", "portForwarding.natpmp.lifetime", func(m map[string]any, _ string, _ keys) {
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{"lifetime": "2s"}}
	}},
	{"transmission url with password", "portForwarding.transmission.url", func(m map[string]any, _ string, k keys) {
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{}, "transmission": map[string]any{"url": "http://admin:" + k.priv[:20] + "@127.0.0.1:9091/transmission/rpc"}}
	}},
	{"qbittorrent credentials readable", "portForwarding.qbittorrent.credentialsFile", func(m map[string]any, dir string, k keys) {
		p := filepath.Join(dir, "qbt")
		os.WriteFile(p, []byte("admin:"+k.priv[:20]+"\n"), 0o644)
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{}, "qbittorrent": map[string]any{"url": "http://127.0.0.1:8080", "credentialsFile": p, "user": "root"}}
	}},
	{"qbittorrent credentials without colon", "portForwarding.qbittorrent.credentialsFile", func(m map[string]any, dir string, k keys) {
		p := filepath.Join(dir, "qbt")
		os.WriteFile(p, []byte(k.priv[:20]+"\n"), 0o600)
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{}, "qbittorrent": map[string]any{"url": "http://127.0.0.1:8080", "credentialsFile": p, "user": "root"}}
	}},
	{"qbittorrent credentials without user", "portForwarding.qbittorrent.user", func(m map[string]any, dir string, k keys) {
		p := filepath.Join(dir, "qbt")
		os.WriteFile(p, []byte("admin:"+k.priv[:20]+"\n"), 0o600)
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{}, "qbittorrent": map[string]any{"url": "http://127.0.0.1:8080", "credentialsFile": p}}
	}},
	{"onChange relative", "portForwarding.onChange[0]", func(m map[string]any, _ string, _ keys) {
		m["portForwarding"] = map[string]any{"natpmp": map[string]any{}, "onChange": []any{"port-changed.sh"}}
	}},
	// Issue 21.5: field names are exact (encoding/json alone folds case).
	{"field name in another case", `wireGuard: unknown field "wireGuard" (did you mean "wireguard"?)`, func(m map[string]any, _ string, _ keys) {
		m["wireGuard"] = m["wireguard"]
		delete(m, "wireguard")
	}},
	{"nested field name in another case", `wireguard.configfile: unknown field "configfile" (did you mean "configFile"?)`, func(m map[string]any, _ string, _ keys) {
		w := m["wireguard"].(map[string]any)
		w["configfile"] = w["configFile"]
		delete(w, "configFile")
	}},
	{"field name in capitals", `DNS: unknown field "DNS" (did you mean "dns"?)`, func(m map[string]any, _ string, _ keys) {
		m["DNS"] = map[string]any{"mode": "strict"}
	}},
	// Issue 20: a metrics socket under /tmp (the test's directory is
	// there), where any user may create names on its path.
	{"metrics socket under /tmp", "metrics.listen: directory /tmp is writable by group or others", func(m map[string]any, dir string, _ keys) {
		m["metrics"] = map[string]any{"listen": "unix:" + filepath.Join(dir, "metrics", "m.sock")}
	}},
}

// textCase edits the config's JSON text, for what a map cannot hold.
type textCase struct {
	name, field string
	edit        func(string) string
}

var textCases = []textCase{
	// Issue 21.7a: syntax errors by line and column, not byte offset.
	{"json syntax error", "invalid JSON at line 3, column 3", func(s string) string {
		return strings.Replace(s, ",", ",\n\n  ,", 1) // a stray comma on line 3
	}},
	{"json cut short", "the file ends inside a value at line 1, column", func(s string) string { return s[:len(s)-2] }},
}

// TestBadInput runs every case through validate, up and run.
func TestBadInput(t *testing.T) {
	host := hostNS(t)
	total := 0
	check := func(t *testing.T, cfg, name, field, key string) {
		before := snapshot(t, host, name)
		for _, cmd := range []string{"validate", "up", "run"} {
			rc, stdout, stderr := agent(t, host, cmd, "--config", cfg)
			msg := strings.TrimRight(stderr, "\n")
			if rc != 2 {
				t.Errorf("%s: exit %d, want 2; stderr %q stdout %q", cmd, rc, stderr, stdout)
			}
			if strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "vpn-agent: ") {
				t.Errorf("%s: want exactly one error line, got %q", cmd, stderr)
			}
			if !strings.Contains(msg, field) {
				t.Errorf("%s: error %q does not name %q", cmd, msg, field)
			}
			if strings.Contains(stderr+stdout, key) || strings.Contains(stderr+stdout, key[:20]) {
				t.Errorf("%s: output echoes the private key", cmd)
			}
			if after := snapshot(t, host, name); after != before {
				t.Errorf("%s changed the system:\nbefore:\n%s\nafter:\n%s", cmd, before, after)
			}
		}
	}
	// run writes a wg-quick file (wgQuick of fresh keys, as edited by wgEdit,
	// with mode) and a config naming it (as edited by cfgEdit) and checks
	// that every command refuses it naming field.
	run := func(t *testing.T, field string, wgEdit func(keys, string) string, mode os.FileMode, cfgEdit func(map[string]any, string, keys), textEdit ...func(string) string) {
		dir := t.TempDir()
		k := newKeys(t)
		name := "bi" + randHex(4)
		wg := filepath.Join(dir, "wg.conf")
		write(t, wg, wgEdit(k, wgQuick(k)), mode)
		m := map[string]any{"name": name, "wireguard": map[string]any{"configFile": wg}}
		cfgEdit(m, dir, k)
		b, _ := json.Marshal(m)
		text := string(b)
		for _, e := range textEdit {
			text = e(text)
		}
		cfg := filepath.Join(dir, "c.json")
		write(t, cfg, text, 0o644)
		n, _ := m["name"].(string)
		if n == "" || strings.ContainsAny(n, "/.") {
			n = name
		}
		check(t, cfg, n, field, k.priv)
	}
	noEdit := func(map[string]any, string, keys) {}
	for _, tc := range wgQuickCases {
		total++
		t.Run("wg-quick/"+tc.name, func(t *testing.T) { run(t, tc.field, tc.edit, tc.mode, noEdit) })
	}
	for _, tc := range jsonCases {
		total++
		t.Run("config/"+tc.name, func(t *testing.T) { run(t, tc.field, asIs, 0o600, tc.edit) })
	}
	for _, tc := range textCases {
		total++
		t.Run("config text/"+tc.name, func(t *testing.T) { run(t, tc.field, asIs, 0o600, noEdit, tc.edit) })
	}
	t.Logf("bad input: %d malformed configs and wg-quick files, each through validate, up and run", total)
	if total < 40 {
		t.Errorf("only %d cases; the suite promises at least 40", total)
	}
}

// TestGoodInputControls are positive controls: a valid file, and the same
// file with CRLF endings and a BOM, pass validation, so the failures above
// are about the defects and not the harness.
func TestGoodInputControls(t *testing.T) {
	host := hostNS(t)
	k := newKeys(t)
	for variant, edit := range map[string]func(string) string{
		"plain": func(s string) string { return s },
		"crlf":  func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") },
		"bom":   func(s string) string { return "\xef\xbb\xbf" + s },
	} {
		dir := t.TempDir()
		wg := filepath.Join(dir, "wg.conf")
		write(t, wg, edit(wgQuick(k)), 0o600)
		cfg := filepath.Join(dir, "c.json")
		write(t, cfg, fmt.Sprintf(`{"name":"bigood","wireguard":{"configFile":%q}}`, wg), 0o644)
		if rc, out, errs := agent(t, host, "validate", "--config", cfg); rc != 0 || !strings.Contains(out, "config OK") {
			t.Errorf("%s: validate rc=%d out=%q err=%q", variant, rc, out, errs)
		}
	}
}

// TestSnapshotSeesChanges is the positive control for the snapshot: a
// valid up (to an endpoint that need not answer) must change it, and down
// must restore it exactly.
func TestSnapshotSeesChanges(t *testing.T) {
	host := hostNS(t)
	k := newKeys(t)
	dir := t.TempDir()
	name := "bi" + randHex(4)
	wg := filepath.Join(dir, "wg.conf")
	write(t, wg, wgQuick(k), 0o600)
	cfg := filepath.Join(dir, "c.json")
	write(t, cfg, fmt.Sprintf(`{"name":%q,"wireguard":{"configFile":%q},"backend":"userspace"}`, name, wg), 0o644)
	before := snapshot(t, host, name)
	if rc, _, errs := agent(t, host, "up", "--config", cfg); rc != 0 {
		t.Fatalf("up: rc=%d %s", rc, errs)
	}
	t.Cleanup(func() { agent(t, host, "down", name) })
	if snapshot(t, host, name) == before {
		t.Fatal("snapshot did not change after a successful up: it cannot detect changes")
	}
	if rc, _, errs := agent(t, host, "down", name); rc != 0 {
		t.Fatalf("down: rc=%d %s", rc, errs)
	}
	if after := snapshot(t, host, name); after != before {
		t.Errorf("down left traces:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// conflictCase is two configs that each pass validation but clash when
// checked together (`validate --config A --config B`): the cross-namespace
// checks NixOS used to do in Nix.
type conflictCase struct {
	name, field string
	a, b        func(m map[string]any)
}

func hostLinkOf(n int, maps ...map[string]any) map[string]any {
	h := map[string]any{"enable": true, "hostAddress": fmt.Sprintf("10.200.%d.1/30", n), "namespaceAddress": fmt.Sprintf("10.200.%d.2/30", n)}
	if len(maps) > 0 {
		h["portMappings"] = maps
	}
	return h
}

var conflictCases = []conflictCase{
	{"same namespace name", "name", nil, func(m map[string]any) { m["name"] = "bicfa" }},
	{"same interface name", "interface",
		func(m map[string]any) { m["interface"] = "wg-shared" }, func(m map[string]any) { m["interface"] = "wg-shared" }},
	{"interface is the other's veth", "interface",
		func(m map[string]any) { m["hostLink"] = hostLinkOf(1) }, func(m map[string]any) { m["interface"] = "vn-bicfa" }},
	{"same host port", "hostLink.portMappings",
		func(m map[string]any) { m["hostLink"] = hostLinkOf(1, map[string]any{"from": 8080, "to": 80}) },
		func(m map[string]any) {
			m["hostLink"] = hostLinkOf(2, map[string]any{"from": 8080, "to": 81, "protocol": "both"})
		}},
	{"host port is the other's listen port", "wireguard.listenPort",
		func(m map[string]any) { m["wireguard"].(map[string]any)["listenPort"] = 51820 },
		func(m map[string]any) {
			m["hostLink"] = hostLinkOf(2, map[string]any{"from": 51820, "to": 80, "protocol": "udp"})
		}},
	{"same host-link subnet", "hostLink.hostAddress",
		func(m map[string]any) { m["hostLink"] = hostLinkOf(1) }, func(m map[string]any) { m["hostLink"] = hostLinkOf(1) }},
	{"overlapping host-link subnets", "hostLink.hostAddress",
		func(m map[string]any) {
			m["hostLink"] = map[string]any{"enable": true, "hostAddress": "10.200.0.1/16", "namespaceAddress": "10.200.0.2/16"}
		},
		func(m map[string]any) { m["hostLink"] = hostLinkOf(7) }},
}

// TestConflicts: each pair fails `validate` with exit 2 and one line that
// names both files and the field, while each file alone passes; nothing
// on the system changes.
func TestConflicts(t *testing.T) {
	host := hostNS(t)
	for _, tc := range conflictCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			k := newKeys(t)
			wg := filepath.Join(dir, "wg.conf")
			write(t, wg, wgQuick(k), 0o600)
			var files []string
			for i, edit := range []func(map[string]any){tc.a, tc.b} {
				m := map[string]any{"name": []string{"bicfa", "bicfb"}[i], "wireguard": map[string]any{"configFile": wg}}
				if edit != nil {
					edit(m)
				}
				b, _ := json.Marshal(m)
				f := filepath.Join(dir, []string{"a.json", "b.json"}[i])
				write(t, f, string(b), 0o644)
				if rc, _, errs := agent(t, host, "validate", "--config", f); rc != 0 {
					t.Fatalf("%s alone: rc=%d %s", f, rc, errs)
				}
				files = append(files, f)
			}
			before := snapshot(t, host, "bicf")
			rc, stdout, stderr := agent(t, host, "validate", "--config", files[0], "--config", files[1])
			msg := strings.TrimRight(stderr, "\n")
			if rc != 2 {
				t.Errorf("exit %d, want 2; stderr %q stdout %q", rc, stderr, stdout)
			}
			if strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "vpn-agent: ") {
				t.Errorf("want exactly one error line, got %q", stderr)
			}
			for _, want := range []string{files[0], files[1], tc.field} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			if strings.Contains(stderr+stdout, k.priv) {
				t.Errorf("output echoes the private key")
			}
			if after := snapshot(t, host, "bicf"); after != before {
				t.Errorf("validate changed the system:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// Issue 20: metrics.listen on every address is good input with a warning
// line on stderr (exit 0); on 127.0.0.1 (the control) there is none.
func TestMetricsWildcardWarns(t *testing.T) {
	host := hostNS(t)
	k := newKeys(t)
	dir := t.TempDir()
	wg := filepath.Join(dir, "wg.conf")
	write(t, wg, wgQuick(k), 0o600)
	for listen, warn := range map[string]bool{"0.0.0.0:9586": true, "[::]:9586": true, "127.0.0.1:9586": false} {
		cfg := filepath.Join(dir, "c.json")
		write(t, cfg, fmt.Sprintf(`{"name":"bigood","wireguard":{"configFile":%q},"metrics":{"listen":%q}}`, wg, listen), 0o644)
		rc, out, errs := agent(t, host, "validate", "--config", cfg)
		if rc != 0 || !strings.Contains(out, "config OK") {
			t.Errorf("%s: validate rc=%d out=%q err=%q, want accepted", listen, rc, out, errs)
		}
		want := "vpn-agent: warning: metrics.listen " + listen + " serves /metrics and /healthz on every address of this host, without authentication"
		if got := strings.HasPrefix(errs, want) && strings.Count(errs, "\n") == 1; got != warn {
			t.Errorf("%s: stderr %q; want the one warning line: %v", listen, errs, warn)
		}
		if !warn && errs != "" {
			t.Errorf("%s: stderr %q, want nothing", listen, errs)
		}
	}
}
