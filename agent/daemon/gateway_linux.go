package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/natpmp"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward/apps"
)

// gatewayDialer opens the NAT-PMP client for a round of requests: a UDP
// socket made inside the namespace, so that the requests leave through
// the tunnel (the only way out), from the tunnel address.
func gatewayDialer(ns string) portforward.Dialer {
	return func(_ context.Context, gw netip.Addr) (portforward.Gateway, func(), error) {
		var conn net.Conn
		err := netns.Do(ns, func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(gw, natpmp.Port)))
			conn = c
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("socket to %s in namespace %s: %w", gw, ns, err)
		}
		return natpmpGateway{natpmp.NewClient(conn)}, func() { conn.Close() }, nil
	}
}

// natpmpGateway is a natpmp.Client as the manager sees it.
type natpmpGateway struct{ c *natpmp.Client }

func (g natpmpGateway) Map(ctx context.Context, proto string, internal, external uint16, lifetime time.Duration) (portforward.Lease, error) {
	p := natpmp.UDP
	if proto == "tcp" {
		p = natpmp.TCP
	}
	m, err := g.c.Map(ctx, p, internal, external, lifetime)
	if err != nil {
		return portforward.Lease{}, err
	}
	return portforward.Lease{Protocol: proto, Internal: m.InternalPort, External: m.ExternalPort, Lifetime: m.Lifetime, Epoch: m.Epoch}, nil
}

// gatewayRestarted is RFC 6886's epoch check.
var gatewayRestarted = natpmp.Restarted

// pushers are the applications the port goes to (dialled inside the
// namespace) and the onChange command (run there through vpn-agent exec).
func pushers(s *config.Spec) (appList []portforward.Pusher, onChange portforward.Pusher, err error) {
	pf := s.PortForward
	if a := pf.Transmission; a != nil {
		appList = append(appList, apps.NewTransmission(a.URL, credentials(a), apps.NamespaceHTTPClient(s.Name, owner(a))))
	}
	if a := pf.QBittorrent; a != nil {
		appList = append(appList, apps.NewQBittorrent(a.URL, credentials(a), apps.NamespaceHTTPClient(s.Name, owner(a))))
	}
	if len(pf.OnChange) > 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("portForwarding.onChange: find the agent's executable: %w", err)
		}
		onChange = apps.NewCommand(pf.OnChange, apps.NamespaceRunner(exe, s.Name))
	}
	return appList, onChange, nil
}

func credentials(a *config.AppSpec) *apps.Credentials {
	if a.User == "" {
		return nil
	}
	return &apps.Credentials{User: a.User, Password: a.Password}
}

// owner is the user the application runs as, whose listener alone is
// sent a request; nil (no check) when config names none, which it allows
// only without a credentials file.
func owner(a *config.AppSpec) *apps.Owner {
	if a.RunsAs == "" {
		return nil
	}
	return &apps.Owner{UID: a.UID, Name: a.RunsAs}
}
