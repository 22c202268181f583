package cli

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
)

// waitHandshake waits, up to timeout, for the namespace's tunnel to
// complete a first handshake, so that a script can tell "up but
// unreachable" from "working". WireGuard handshakes only when there is
// something to send: every few seconds one empty datagram leaves a
// socket created inside the namespace, for the first resolver's discard
// port (through the tunnel, as the kill switch allows; it carries
// nothing).
func waitHandshake(s *config.Spec, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var nudged time.Time
	endpoint := ""
	for {
		if time.Since(nudged) >= 3*time.Second {
			nudge(s)
			nudged = time.Now()
		}
		if d, err := wireguard.ReadDevice(s.Name, s.Interface); err == nil {
			for _, p := range d.Peers {
				if !p.LastHandshakeTime.IsZero() {
					return nil
				}
				if p.Endpoint != nil {
					endpoint = p.Endpoint.String()
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s is up but no handshake with its server %s completed within %v: the server is unreachable or does not accept the key", s.Name, endpoint, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nudge sends one empty datagram into the tunnel from inside the
// namespace.
func nudge(s *config.Spec) {
	dst := netip.AddrFrom4([4]byte{10, 0, 0, 1})
	if len(s.DNS) > 0 {
		dst = s.DNS[0]
	} else if s.Probe != nil {
		dst = s.Probe.Target.Addr()
	}
	netns.Do(s.Name, func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(nil)
		return err
	})
}
