// Package testbed builds private networks out of network namespaces for
// the demo, the bench and the tests: namespaces and veth pairs with their
// addresses and routes, threads and commands running inside a namespace,
// unique names, and the sweeping of what a dead run left behind. The VPN
// provider (a WireGuard peer plus DNS, echo and HTTP servers) is its
// sub-package provider; the end-to-end tests' topology is Topology.
//
// Everything goes through netlink, nftables and wireguard-go; nothing
// here starts ip, nft, wg, tc or a shell, so the package can be linked
// into vpn-agent (for `vpn-agent demo`).
package testbed
