package liveness

import (
	"net"
	"net/netip"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

// Nudge sends one empty datagram into the tunnel from a socket created
// inside the namespace: WireGuard handshakes only when it has something
// to send, so this is how a server just switched to (or a first
// handshake awaited) gets judged on an idle namespace. It goes to the
// discard port of the server's first resolver (or the probe target),
// through the tunnel, as the kill switch allows, and carries nothing.
func Nudge(s *config.Spec) error {
	dst := netip.AddrFrom4([4]byte{10, 0, 0, 1})
	if len(s.DNS) > 0 {
		dst = s.DNS[0]
	} else if s.Probe != nil {
		dst = s.Probe.Target.Addr()
	}
	return netns.Do(s.Name, func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(nil)
		return err
	})
}
