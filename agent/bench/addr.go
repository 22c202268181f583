package bench

// The bench's private addresses, from 198.18.0.0/15 (RFC 2544, reserved
// for benchmarking). They only exist inside the bench's own namespaces.
const (
	underlayAgent = "198.18.0.1" // underlay namespace end of the veth
	underlayPeer  = "198.18.0.2" // provider namespace end: WireGuard endpoint, direct-mode server
	underlayBits  = 30           // the veth subnet
	peerPort      = 51820        // the provider's WireGuard port
	tunnelPeer    = "198.18.1.1" // provider's tunnel address: tunnel-mode server
	tunnelAgent   = "198.18.1.2" // the agent's tunnel address
	tunnelRef     = "198.18.1.3" // the reference tunnel's address
	tunnelUnb     = "198.18.1.4" // the unbounded agent's tunnel address (ModeUnbounded)
	tunnelSysRef  = "198.18.1.5" // the system reference tunnel's address
	tunnelSide    = "198.18.1.6" // the sidecar agent's tunnel address (ModeSidecar)
	podAddr       = "198.18.0.5" // the sidecar pod's end of its veth to the provider
	podPeer       = "198.18.0.6" // the provider's end: the pod's gateway and the sidecar's endpoint
	refServer     = "198.18.2.1" // provider address reached only through the reference tunnel
	sysRefServer  = "198.18.2.2" // ... only through the system reference tunnel
	iperfPort     = 5201
	rrPort        = 7001
)

// target returns the server address a mode's client connects to.
func target(m Mode) string {
	switch m {
	case ModeDirect:
		return underlayPeer
	case ModeReference:
		return refServer
	case ModeSystemRef:
		return sysRefServer
	}
	return tunnelPeer
}
