package wgquick

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Keys are generated per run: no key material lives in the repository.
var (
	privKey = genKey()
	pubKey  = genKey()
	pskKey  = genKey()
)

func genKey() string {
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		panic(err)
	}
	return k.String()
}

var good = `# provider file
[Interface]
PrivateKey = ` + privKey + `
Address = 10.2.0.2/32, fd00:2::2/128
DNS = 10.2.0.1, vpn.example
MTU = 1380
ListenPort = 51000
FwMark = 0xca6c
PostUp = iptables -A something   # never run
Table = off

[Peer]
PublicKey = ` + pubKey + `
PresharedKey = ` + pskKey + `
Endpoint = [2001:db8::1]:51820
AllowedIPs = 0.0.0.0/0
AllowedIPs = ::/0
PersistentKeepalive = 25
`

func TestParseGood(t *testing.T) {
	f, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Addresses) != 2 || f.Addresses[1] != netip.MustParsePrefix("fd00:2::2/128") {
		t.Errorf("addresses = %v", f.Addresses)
	}
	if len(f.DNS) != 1 || f.DNS[0] != netip.MustParseAddr("10.2.0.1") || len(f.Search) != 1 {
		t.Errorf("dns = %v search = %v", f.DNS, f.Search)
	}
	if f.MTU != 1380 || f.ListenPort != 51000 || f.FwMark != 0xca6c {
		t.Errorf("mtu/port/mark = %d/%d/%#x", f.MTU, f.ListenPort, f.FwMark)
	}
	if len(f.Peers) != 1 || f.Peers[0].PresharedKey == nil || len(f.Peers[0].AllowedIPs) != 2 || f.Peers[0].PersistentKeepalive != 25 {
		t.Errorf("peer = %+v", f.Peers)
	}
	if len(f.Warnings) != 2 {
		t.Errorf("warnings = %v, want PostUp and Table", f.Warnings)
	}
}

// CRLF line endings and a BOM come from Windows editors; wg-quick's shell
// parser tolerates them, and so do we: the parse must be identical.
func TestCRLFAndBOMParseIdentically(t *testing.T) {
	want, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"crlf":     strings.ReplaceAll(good, "\n", "\r\n"),
		"bom":      "\xef\xbb\xbf" + good,
		"bom+crlf": "\xef\xbb\xbf" + strings.ReplaceAll(good, "\n", "\r\n"),
	} {
		got, err := Parse([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got.PrivateKey != want.PrivateKey || len(got.Peers) != 1 || got.Peers[0].Endpoint != want.Peers[0].Endpoint || got.MTU != want.MTU {
			t.Errorf("%s: parse differs", name)
		}
	}
}

func TestParseErrors(t *testing.T) {
	iface := "[Interface]\nPrivateKey = " + privKey + "\nAddress = 10.2.0.2/32\n"
	peer := "[Peer]\nPublicKey = " + pubKey + "\nEndpoint = 198.51.100.1:51820\nAllowedIPs = 0.0.0.0/0\n"
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no [Interface]"},
		{"truncated private key", strings.Replace(iface, privKey, privKey[:20], 1) + peer, "PrivateKey: not a valid WireGuard key"},
		{"truncated public key", iface + strings.Replace(peer, pubKey, pubKey[:43], 1), "PublicKey: not a valid WireGuard key"},
		{"key not base64", strings.Replace(iface, privKey, strings.Repeat("!", 44), 1) + peer, "PrivateKey"},
		{"missing private key", "[Interface]\nAddress = 10.2.0.2/32\n" + peer, "PrivateKey: missing"},
		{"missing address", "[Interface]\nPrivateKey = " + privKey + "\n" + peer, "Address: missing"},
		{"no peer", iface, "no [Peer]"},
		{"peer without public key", iface + "[Peer]\nEndpoint = 198.51.100.1:51820\nAllowedIPs = 0.0.0.0/0\n", "no PublicKey"},
		{"duplicate interface", iface + iface + peer, "duplicate [Interface]"},
		{"duplicate peer", iface + peer + peer, "repeats the public key"},
		{"duplicate key", iface + "PrivateKey = " + privKey + "\n" + peer, "given twice"},
		{"unknown interface key", iface + "Foo = bar\n" + peer, "line 4: unknown key in [Interface]"},
		{"unknown peer key", iface + peer + "Bar = 1\n", "line 8: unknown key in [Peer]"},
		{"unknown section", iface + "[Peers]\n" + peer, "unknown section"},
		{"key outside section", "PrivateKey = " + privKey + "\n" + iface + peer, "outside any section"},
		{"no equals", iface + "Address\n" + peer, "neither a [Section] nor Key = Value"},
		{"bad address", strings.Replace(iface, "10.2.0.2/32", "10.2.0.300/32", 1) + peer, "Address"},
		{"bad cidr bits", strings.Replace(iface, "10.2.0.2/32", "10.2.0.2/33", 1) + peer, "Address"},
		{"ipv6 endpoint without brackets", iface + strings.Replace(peer, "198.51.100.1:51820", "2001:db8::1:51820", 1), "needs brackets"},
		{"endpoint without port", iface + strings.Replace(peer, "198.51.100.1:51820", "198.51.100.1", 1), "has no port"},
		{"endpoint port zero", iface + strings.Replace(peer, ":51820", ":0", 1), "out of range"},
		{"endpoint port too big", iface + strings.Replace(peer, ":51820", ":70000", 1), "out of range"},
		{"endpoint bad host", iface + strings.Replace(peer, "198.51.100.1", "bad host!", 1), "neither an IP address nor a host name"},
		{"endpoint unclosed bracket", iface + strings.Replace(peer, "198.51.100.1:51820", "[2001:db8::1:51820", 1), "unclosed bracket"},
		{"endpoint bracketed v4", iface + strings.Replace(peer, "198.51.100.1:51820", "[198.51.100.1]:51820", 1), "not an IPv6 address"},
		{"bad allowed ip", iface + strings.Replace(peer, "0.0.0.0/0", "0.0.0.0/x", 1), "not a CIDR"},
		{"mtu not a number", iface + "MTU = big\n" + peer, "MTU"},
		{"mtu too small", iface + "MTU = 100\n" + peer, "out of range"},
		{"listen port too big", iface + "ListenPort = 65536\n" + peer, "ListenPort"},
		{"bad fwmark", iface + "FwMark = 0xzz\n" + peer, "FwMark"},
		{"bad keepalive", iface + peer + "PersistentKeepalive = soon\n", "PersistentKeepalive"},
		{"bad dns", iface + "DNS = 10.2.0.1, not a domain!\n" + peer, "DNS"},
		{"control character", iface + "Address = 10.2.0.3/32\x00\n" + peer, "control character"},
		{"binary garbage", "\x7fELF\x02\x01\x01", "control character"},
		{"json instead of ini", `{"name": "x"}`, "neither a [Section]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not *Error", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			for _, k := range []string{privKey, pubKey, privKey[:20], pubKey[:43]} {
				if strings.Contains(msg, k) {
					t.Errorf("error echoes key material: %q", msg)
				}
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(strings.ReplaceAll(good, "\n", "\r\n")))
	f.Add([]byte("[Interface]\nPrivateKey=\n[Peer]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := Parse(data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error: %q", err)
			}
			if strings.Contains(err.Error(), privKey) {
				t.Fatalf("error echoes a key")
			}
			return
		}
		if len(fl.Addresses) == 0 || len(fl.Peers) == 0 {
			t.Fatalf("accepted a file without addresses or peers")
		}
		for _, p := range fl.Peers {
			if p.Endpoint != "" {
				if _, _, err := ParseEndpoint(p.Endpoint); err != nil {
					t.Fatalf("accepted endpoint %q that ParseEndpoint rejects", p.Endpoint)
				}
			}
		}
	})
}

// A bare key on a line of its own (a common paste error) must not be
// echoed back in the error.
func TestErrorsNeverEchoKeys(t *testing.T) {
	for _, in := range []string{
		"  [" + privKey,
		"[Interface]\n" + privKey + "\n",
		"[Interface]\nAddress = " + privKey + "\n",
		"[Interface]\nDNS = " + privKey + "\n",
		"[Interface]\nPrivateKey = " + privKey + "\nAddress = 10.0.0.2/32\n[Peer]\nPublicKey = " + pubKey + "\nEndpoint = " + privKey + "\n",
	} {
		_, err := Parse([]byte(in))
		if err == nil {
			t.Fatalf("accepted %q", in)
		}
		if strings.Contains(err.Error(), privKey) || strings.Contains(err.Error(), privKey[:40]) {
			t.Errorf("error echoes the key: %q", err)
		}
	}
}

// Nothing read from the file is echoed: not a key cut short (redaction by
// shape needs 40 characters; these are 12), not a key mistyped on the left
// of '=' (a base64 key ends in '='), not a value of any other key.
func TestErrorsEchoNothingFromTheFile(t *testing.T) {
	frag := privKey[:12]
	for _, in := range []string{
		"[Interface]\nPrivateKey: " + privKey + "\n",
		"[Interface]\n" + frag + " = 1\n",
		"[" + frag + "]\n",
		"[Interface]\nAddress = " + frag + "\n",
		"[Interface]\nAddress = 10.0.0.2/" + frag + "\n",
		"[Interface]\nDNS = 10.0.0.1, " + frag + "!\n",
		"[Interface]\nMTU = " + frag + "\n",
		"[Interface]\nFwMark = " + frag + "\n",
		"[Interface]\nListenPort = " + frag + "\n",
		"[Interface]\nPrivateKey = " + frag + "\n",
		"[Peer]\nEndpoint = " + frag + ":1:2\n",
		"[Peer]\nEndpoint = [" + frag + "]:51820\n",
		"[Peer]\nEndpoint = " + frag + "!:51820\n",
		"[Peer]\nEndpoint = 192.0.2.1:" + frag + "\n",
		"[Peer]\nAllowedIPs = " + frag + "\n",
		"[Peer]\nPersistentKeepalive = " + frag + "\n",
	} {
		_, err := Parse([]byte(in))
		if err == nil {
			t.Fatalf("accepted %q", in)
		}
		if strings.Contains(err.Error(), frag) || strings.Contains(err.Error(), frag[:8]) {
			t.Errorf("error echoes file content: %q", err)
		}
	}
}
