// Package apps pushes the port a VPN provider forwards to the
// applications confined in the namespace: Transmission (RPC session-set),
// qBittorrent (Web API v2 setPreferences) and a command of the user's
// (onChange). Each is a Pusher; the port-forwarding manager decides when
// to push and retries a failed push.
//
// The pushers talk to the applications through a Doer, in production
// NamespaceHTTPClient, whose sockets are created inside the namespace and,
// when config names the user the application runs as, checked before a
// byte is sent to be that user's (so a credential never reaches a
// listener another user bound on the application's port first), and
// run the command through a RunFunc, in production NamespaceRunner, which
// runs it the way `vpn-agent exec NAME -- CMD` does. Nothing here starts
// a shell or a network tool. Errors are one line naming the application
// and its URL, never a password.
package apps

import "context"

// Pusher tells one application the forwarded port.
type Pusher interface {
	// Name is the application: "transmission", "qbittorrent", "onChange".
	Name() string
	// Push sets port for protocols ("tcp", "udp"). Port 0: the forwarded
	// port was lost (the applications keep their port; the command is told).
	Push(ctx context.Context, port uint16, protocols []string) error
}
