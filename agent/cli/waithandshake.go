package cli

import (
	"fmt"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
)

// waitHandshake waits, up to timeout, for the namespace's tunnel to
// complete a first handshake, so that a script can tell "up but
// unreachable" from "working". WireGuard handshakes only when there is
// something to send: every few seconds liveness.Nudge sends one empty
// datagram into the tunnel.
func waitHandshake(s *config.Spec, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var nudged time.Time
	endpoint := ""
	for {
		if time.Since(nudged) >= 3*time.Second {
			liveness.Nudge(s)
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
			return fmt.Errorf("namespace %s: no handshake with its server %s completed within %v: the server is unreachable or does not accept the key", s.Name, endpoint, timeout.Round(100*time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
