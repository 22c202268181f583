package apps

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

// NamespaceHTTPClient is an HTTP client whose connections are made inside
// namespace ns: each socket is created on a thread in ns (netns.Do), so
// it stays there for its whole life, and 127.0.0.1 is the namespace's
// loopback. It resolves no names (a lookup would leave from the host):
// the URL's host must be an IP address or localhost (127.0.0.1). It uses
// no proxy, follows no redirect, keeps no idle connection, and bounds
// every request (dial 5 s, answer 10 s, all of it 15 s).
//
// With owner (config's user of the application), every connection is
// checked once made, before a byte is sent: its far end in ns must be a
// socket of owner's uid (sock_diag, see namespaceSockets), or the
// request fails with an *OwnerError naming who listens instead.
func NamespaceHTTPClient(ns string, owner *Owner) *http.Client {
	dial := namespaceDialer(ns)
	if owner != nil {
		dial = ownerCheckedDial(dial, *owner, namespaceSockets(ns))
	}
	return newHTTPClient(dial)
}

func namespaceDialer(ns string) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		if host == "localhost" {
			host = "127.0.0.1"
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("dial %s: want an IP address or localhost (names are not resolved: a lookup would leave from the host)", addr)
		}
		var c net.Conn
		err = netns.Do(ns, func() (err error) {
			// An IP address: the dialer creates the socket on this
			// goroutine, so on this thread, in ns.
			d := net.Dialer{Timeout: dialTimeout}
			c, err = d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("in netns %s: %w", ns, err)
		}
		return c, nil
	}
}
