package wireguard

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// sampleGet is a UAPI "get" as wireguard-go's IpcGetOperation writes it:
// a device with a fixed port and mark, a peer that has handshaken and
// one that never has (preshared key all zeros, as wireguard-go prints it).
const sampleGet = "private_key=e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a\n" +
	"listen_port=51820\n" +
	"fwmark=51820\n" +
	"public_key=b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33\n" +
	"preshared_key=188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52\n" +
	"protocol_version=1\n" +
	"endpoint=[2001:db8::1]:51820\n" +
	"last_handshake_time_sec=1764600000\n" +
	"last_handshake_time_nsec=123456789\n" +
	"tx_bytes=38333\n" +
	"rx_bytes=2224\n" +
	"persistent_keepalive_interval=25\n" +
	"allowed_ip=0.0.0.0/0\n" +
	"allowed_ip=::/0\n" +
	"public_key=58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376\n" +
	"preshared_key=0000000000000000000000000000000000000000000000000000000000000000\n" +
	"protocol_version=1\n" +
	"endpoint=192.0.2.7:443\n" +
	"last_handshake_time_sec=0\n" +
	"last_handshake_time_nsec=0\n" +
	"tx_bytes=0\n" +
	"rx_bytes=0\n" +
	"persistent_keepalive_interval=0\n" +
	"allowed_ip=10.2.0.1/32\n"

const samplePriv = "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a"

func hexKeyOf(t testing.TB, s string) wgtypes.Key {
	t.Helper()
	var k wgtypes.Key
	if !decodeKey(&k, []byte(s)) {
		t.Fatalf("bad key %q", s)
	}
	return k
}

func ipNet(s string) net.IPNet {
	_, n, _ := net.ParseCIDR(s)
	return *n
}

func TestParseUAPI(t *testing.T) {
	var seen *wgtypes.Key
	var seenKey wgtypes.Key
	derived := hexKeyOf(t, samplePriv).PublicKey()
	d, err := parseUAPI([]byte(sampleGet), func(priv *wgtypes.Key) wgtypes.Key {
		seen, seenKey = priv, *priv
		return priv.PublicKey()
	})
	if err != nil {
		t.Fatal(err)
	}
	if seenKey != hexKeyOf(t, samplePriv) {
		t.Fatal("the callback did not get the device's private key")
	}
	if *seen != (wgtypes.Key{}) {
		t.Error("the decoded private key was not wiped after the callback")
	}
	want := &Device{PublicKey: derived, ListenPort: 51820, FirewallMark: 51820, Peers: []wgtypes.Peer{{
		PublicKey:                   hexKeyOf(t, "b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33"),
		Endpoint:                    &net.UDPAddr{IP: net.ParseIP("2001:db8::1"), Port: 51820},
		LastHandshakeTime:           time.Unix(1764600000, 123456789),
		TransmitBytes:               38333,
		ReceiveBytes:                2224,
		PersistentKeepaliveInterval: 25 * time.Second,
		AllowedIPs:                  []net.IPNet{ipNet("0.0.0.0/0"), ipNet("::/0")},
		ProtocolVersion:             1,
	}, {
		PublicKey:       hexKeyOf(t, "58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376"),
		Endpoint:        &net.UDPAddr{IP: net.IPv4(192, 0, 2, 7).To4(), Port: 443},
		AllowedIPs:      []net.IPNet{ipNet("10.2.0.1/32")},
		ProtocolVersion: 1,
	}}}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", d, want)
	}
	if !d.Peers[1].LastHandshakeTime.IsZero() {
		t.Error("a peer that never handshook has a handshake time")
	}
	// What status and metrics print of it is what wgctrl's parse gives.
	if got := d.Peers[0].Endpoint.String(); got != "[2001:db8::1]:51820" {
		t.Errorf("endpoint %s", got)
	}
	if got := netsString(d.Peers[0].AllowedIPs); got != "0.0.0.0/0,::/0" {
		t.Errorf("allowed IPs %s", got)
	}
}

// The handshake time is read as wgctrl's userspace client reads it
// (internal/wguser's parse): set at the nanoseconds line from the last
// seconds line seen, only when both are above zero, never cleared.
func TestParseUAPIHandshakeAsWgctrl(t *testing.T) {
	peer := func(lines ...string) string {
		return "public_key=" + samplePriv + "\n" + strings.Join(lines, "\n") + "\n"
	}
	sec, nsec := "last_handshake_time_sec=", "last_handshake_time_nsec="
	for _, tc := range []struct {
		name string
		in   string
		want []time.Time // per peer; zero: none
	}{
		{"both set", peer(sec+"5", nsec+"7"), []time.Time{time.Unix(5, 7)}},
		{"never", peer(sec+"0", nsec+"0"), []time.Time{{}}},
		{"whole second", peer(sec+"5", nsec+"0"), []time.Time{{}}},
		{"nanoseconds only", peer(sec+"0", nsec+"7"), []time.Time{{}}},
		{"seconds after nanoseconds", peer(nsec+"7", sec+"5"), []time.Time{{}}},
		{"not cleared", peer(sec+"5", nsec+"7", nsec+"0"), []time.Time{time.Unix(5, 7)}},
		{"seconds carried to the next peer", peer(sec+"5", nsec+"0") + peer(nsec+"3"), []time.Time{{}, time.Unix(5, 3)}},
	} {
		d, err := parseUAPI([]byte(tc.in), func(p *wgtypes.Key) wgtypes.Key { return *p })
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []time.Time
		for _, p := range d.Peers {
			got = append(got, p.LastHandshakeTime)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: handshakes %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The protocol's framing: an empty line ends the reply, errno=0 is
// success, unknown keys are skipped; no private key, no public key.
func TestParseUAPIFraming(t *testing.T) {
	noKey := func(*wgtypes.Key) wgtypes.Key {
		t.Fatal("asked for a key the text does not have")
		return wgtypes.Key{}
	}
	d, err := parseUAPI([]byte("listen_port=1\nsome_future_key=x\nerrno=0\n\nfwmark=7\n"), noKey)
	if err != nil {
		t.Fatal(err)
	}
	if d.ListenPort != 1 || d.FirewallMark != 0 || d.PublicKey != (wgtypes.Key{}) || d.Peers != nil {
		t.Fatalf("parsed %+v: want the port only, nothing after the empty line", d)
	}
	if d, err := parseUAPI(nil, noKey); err != nil || !reflect.DeepEqual(d, &Device{}) {
		t.Fatalf("empty reply: %+v, %v", d, err)
	}
}

// Every malformed line is an error naming the line and the key, and none
// echoes a value: a key, even a broken one, never reaches an error.
func TestParseUAPIErrors(t *testing.T) {
	secret := samplePriv[:63] // one digit short
	for _, tc := range []struct{ in, want string }{
		{"private_key=" + secret + "\n", "uapi line 1: bad private_key"},
		{"private_key=" + samplePriv + "zz\n", "uapi line 1: bad private_key"},
		{"listen_port=65536\n", "uapi line 1: bad listen_port"},
		{"listen_port=-1\n", "uapi line 1: bad listen_port"},
		{"fwmark=4294967296\n", "uapi line 1: bad fwmark"},
		{"garbage\n", "uapi line 1: not key=value"},
		{"errno=5\n", "uapi: errno 5"},
		{"errno=x\n", "uapi line 1: bad errno"},
		{"endpoint=192.0.2.1:1\n", "uapi line 1: endpoint before any public_key"},
		{"public_key=" + secret + "\n", "uapi line 1: bad public_key"},
		{"public_key=" + samplePriv + "\npreshared_key=" + secret + "\n", "uapi line 2: bad preshared_key"},
		{"public_key=" + samplePriv + "\nendpoint=host.example:1\n", "uapi line 2: bad endpoint"},
		{"public_key=" + samplePriv + "\nallowed_ip=10.0.0.0/33\n", "uapi line 2: bad allowed_ip"},
		{"public_key=" + samplePriv + "\ntx_bytes=-1\n", "uapi line 2: bad tx_bytes"},
		{"public_key=" + samplePriv + "\nlast_handshake_time_nsec=1000000000\n", "uapi line 2: bad last_handshake_time_nsec"},
		{"public_key=" + samplePriv + "\nlast_handshake_time_sec=1099511627776\n", "uapi line 2: bad last_handshake_time_sec"},
		{"public_key=" + samplePriv + "\npersistent_keepalive_interval=65536\n", "uapi line 2: bad persistent_keepalive_interval"},
		{"public_key=" + samplePriv + "\nlisten_port=1\n", "uapi line 2: listen_port after a peer"},
	} {
		d, err := parseUAPI([]byte(tc.in), func(p *wgtypes.Key) wgtypes.Key { return *p })
		if err == nil {
			t.Errorf("%q: parsed %+v, want %q", tc.in, d, tc.want)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%q: error %q, want %q", tc.in, err, tc.want)
		}
	}
}

// errorShape is every error parseUAPI may return: fixed words, a line
// number, a key name; never a value.
var errorShape = regexp.MustCompile(`^uapi( line [0-9]+: (not key=value|bad [a-z_]+|[a-z_]+ before any public_key|[a-z_]+ after a peer)|: errno -?[0-9]+)$`)

func FuzzParseUAPI(f *testing.F) {
	f.Add([]byte(sampleGet))
	f.Add([]byte(sampleGet + "errno=0\n\n"))
	f.Add([]byte("private_key=" + samplePriv + "\nlisten_port=0\n"))
	f.Add([]byte("public_key=" + samplePriv + "\nendpoint=[fe80::1%eth0]:51820\nallowed_ip=::ffff:10.0.0.1/128\nallowed_ip=10.1.2.3/8\n"))
	f.Add([]byte("public_key=" + samplePriv + "\nlast_handshake_time_sec=1099511627775\nlast_handshake_time_nsec=999999999\n"))
	f.Add([]byte("errno=-22\n"))
	f.Add([]byte("x=y=z\n\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		var handed []*wgtypes.Key
		// The fuzz's "public half" is the key itself, so the round trip
		// below can write it back.
		d, err := parseUAPI(b, func(p *wgtypes.Key) wgtypes.Key { handed = append(handed, p); return *p })
		if !bytes.Equal(b, in) {
			t.Fatal("parseUAPI changed its input")
		}
		for _, p := range handed {
			if *p != (wgtypes.Key{}) {
				t.Fatal("a decoded private key was not wiped")
			}
		}
		if err != nil {
			if !errorShape.MatchString(err.Error()) {
				t.Fatalf("error %q is not of the fixed shape (it may echo the input)", err)
			}
			return
		}
		again, err := parseUAPI(renderUAPI(d), func(p *wgtypes.Key) wgtypes.Key { return *p })
		if err != nil {
			t.Fatalf("%q parsed as %+v, which renders as text it cannot parse: %v", in, d, err)
		}
		if !reflect.DeepEqual(again, d) {
			t.Fatalf("%q parsed as\n%+v\nrendered and parsed again\n%+v", in, d, again)
		}
	})
}

// renderUAPI writes d as a UAPI "get", with d.PublicKey as the private key
// (the fuzz's identity "derivation" makes that round-trip).
func renderUAPI(d *Device) []byte {
	var b strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&b, "%s=%v\n", k, v) }
	if d.PublicKey != (wgtypes.Key{}) {
		line("private_key", hexKey(d.PublicKey))
	}
	line("listen_port", d.ListenPort)
	line("fwmark", d.FirewallMark)
	for _, p := range d.Peers {
		line("public_key", hexKey(p.PublicKey))
		line("protocol_version", p.ProtocolVersion)
		if p.Endpoint != nil {
			line("endpoint", p.Endpoint.AddrPort())
		}
		if !p.LastHandshakeTime.IsZero() {
			line("last_handshake_time_sec", p.LastHandshakeTime.Unix())
			line("last_handshake_time_nsec", p.LastHandshakeTime.Nanosecond())
		}
		line("tx_bytes", p.TransmitBytes)
		line("rx_bytes", p.ReceiveBytes)
		line("persistent_keepalive_interval", int(p.PersistentKeepaliveInterval/time.Second))
		for _, a := range p.AllowedIPs {
			ip, _ := netip.AddrFromSlice(a.IP)
			ones, _ := a.Mask.Size()
			line("allowed_ip", netip.PrefixFrom(ip, ones))
		}
	}
	return []byte(b.String())
}
