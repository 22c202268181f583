package wireguard

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// parseUAPI reads a device from the text of a UAPI "get" (WireGuard's
// cross-platform configuration protocol: key=value lines, the device's
// keys first, then each peer from its public_key line on, up to an empty
// line or the end). Unknown keys are skipped, as the protocol asks.
//
// The private key is decoded only to be handed to public, which returns
// its public half, and is wiped afterwards; preshared keys are checked
// and wiped: the Device holds no secret. Errors name the line and the
// key, never a value.
func parseUAPI(b []byte, public func(priv *wgtypes.Key) wgtypes.Key) (*Device, error) {
	d := &Device{}
	var p *wgtypes.Peer
	// The handshake time is wgctrl's (internal/wguser's parse), exactly:
	// set at a last_handshake_time_nsec line, from it and the last
	// last_handshake_time_sec line seen, only when both are above zero
	// (wireguard-go writes 0 and 0 for a peer that never handshook, both
	// lines for every peer, the seconds first), and never cleared.
	var hsSec, hsNsec int64
	for n := 1; len(b) > 0; n++ {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte("="))
		if !ok {
			return nil, fmt.Errorf("uapi line %d: not key=value", n)
		}
		bad := func() (*Device, error) { return nil, fmt.Errorf("uapi line %d: bad %s", n, k) }
		key := string(k)
		switch key {
		case "errno":
			e, err := strconv.ParseInt(string(v), 10, 32)
			if err != nil {
				return bad()
			}
			if e != 0 {
				return nil, fmt.Errorf("uapi: errno %d", e)
			}
			continue
		case "public_key":
			d.Peers = append(d.Peers, wgtypes.Peer{})
			p = &d.Peers[len(d.Peers)-1]
			if !decodeKey(&p.PublicKey, v) {
				return bad()
			}
			continue
		}
		if p == nil {
			var err error
			switch key {
			case "private_key":
				var priv wgtypes.Key
				ok := decodeKey(&priv, v)
				if ok {
					d.PublicKey = public(&priv)
				}
				clear(priv[:])
				if !ok {
					return bad()
				}
			case "listen_port":
				d.ListenPort, err = parseUint(v, 16)
			case "fwmark":
				d.FirewallMark, err = parseUint(v, 32)
			case "endpoint", "preshared_key", "allowed_ip", "persistent_keepalive_interval", "tx_bytes", "rx_bytes",
				"last_handshake_time_sec", "last_handshake_time_nsec", "protocol_version":
				return nil, fmt.Errorf("uapi line %d: %s before any public_key", n, k)
			}
			if err != nil {
				return bad()
			}
			continue
		}
		var err error
		switch key {
		case "preshared_key":
			var psk wgtypes.Key
			ok := decodeKey(&psk, v)
			clear(psk[:])
			if !ok {
				return bad()
			}
		case "endpoint":
			var ap netip.AddrPort
			if ap, err = netip.ParseAddrPort(string(v)); err == nil {
				p.Endpoint = net.UDPAddrFromAddrPort(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
			}
		case "allowed_ip":
			var pf netip.Prefix
			if pf, err = netip.ParsePrefix(string(v)); err == nil {
				pf = pf.Masked()
				p.AllowedIPs = append(p.AllowedIPs, net.IPNet{IP: pf.Addr().AsSlice(), Mask: net.CIDRMask(pf.Bits(), pf.Addr().BitLen())})
			}
		case "persistent_keepalive_interval":
			var s int
			s, err = parseUint(v, 16)
			p.PersistentKeepaliveInterval = time.Duration(s) * time.Second
		case "tx_bytes":
			p.TransmitBytes, err = parseCounter(v)
		case "rx_bytes":
			p.ReceiveBytes, err = parseCounter(v)
		case "last_handshake_time_sec":
			// 40 bits (some 34,000 years) keep time.Time's arithmetic
			// from overflowing.
			var sec int
			sec, err = parseUint(v, 40)
			hsSec = int64(sec)
		case "last_handshake_time_nsec":
			var ns int
			if ns, err = parseUint(v, 32); err == nil && ns >= int(time.Second) {
				err = strconv.ErrRange
			}
			hsNsec = int64(ns)
			if err == nil && hsSec > 0 && hsNsec > 0 {
				p.LastHandshakeTime = time.Unix(hsSec, hsNsec)
			}
		case "protocol_version":
			p.ProtocolVersion, err = parseUint(v, 32)
		case "private_key", "listen_port", "fwmark":
			return nil, fmt.Errorf("uapi line %d: %s after a peer", n, k)
		}
		if err != nil {
			return bad()
		}
	}
	return d, nil
}

// decodeKey decodes 64 hex digits into k, without a copy elsewhere.
func decodeKey(k *wgtypes.Key, hexKey []byte) bool {
	if len(hexKey) != 2*len(k) {
		return false
	}
	_, err := hex.Decode(k[:], hexKey)
	return err == nil
}

// parseUint parses a decimal of at most bits bits.
func parseUint(v []byte, bits int) (int, error) {
	n, err := strconv.ParseUint(string(v), 10, bits)
	return int(n), err
}

// parseCounter parses a non-negative int64.
func parseCounter(v []byte) (int64, error) {
	n, err := strconv.ParseUint(string(v), 10, 63)
	return int64(n), err
}
