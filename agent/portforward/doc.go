// Package portforward keeps a provider's forwarded port (NAT-PMP, RFC
// 6886) for a confined namespace: it asks the gateway through the tunnel,
// renews the lease at half its lifetime, follows a port the gateway
// changes, opens exactly the forwarded port in the kill switch while the
// lease lives (through Host, which the daemon implements with the engine)
// and hands it to the applications (Pusher: Transmission, qBittorrent, a
// command). It never opens anything while the gateway does not answer, and
// it closes the port when a lease runs out unrenewed.
//
// Everything it touches outside its memory goes through small interfaces
// (Gateway, Host, Pusher, Clock), so the state machine is tested without
// root or network.
package portforward
