package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// The lab's addresses, used inside its namespaces only (TEST-NET-1 and a
// private tunnel range); they are never routed to the real network.
var (
	LabHost      = netip.MustParsePrefix("192.0.2.1/24") // simulated host's uplink
	LabEndpoint  = netip.MustParsePrefix("192.0.2.2/24") // provider's public side
	LabServer    = netip.MustParsePrefix("10.66.0.1/24") // provider inside the tunnel: DNS + HTTP
	LabClient    = netip.MustParsePrefix("10.66.0.2/32") // the confined side
	LabTarget    = "target.demo"
	LabGreeting  = "hello from the far side of the tunnel"
	LabWGPort    = 51820
	labProvIface = "wgprov"
)

// Lab is a self-contained WireGuard provider with a simulated host: a
// provider namespace (WireGuard peer, DNS for LabTarget, HTTP) linked by
// a veth to a host namespace in which the agent runs. Nothing touches the
// machine's own network.
type Lab struct {
	ID             string // "vd" + 6 hex digits
	Host, Provider string // namespace names
	ClientKey      wgtypes.Key
	ServerPub      wgtypes.Key
	prov           *provider.Provider
}

// StartLab creates the namespaces, the peer and its services.
func StartLab() (*Lab, error) {
	id, err := NewID("vd")
	if err != nil {
		return nil, err
	}
	l := &Lab{ID: id, Host: id + "h", Provider: id + "p"}
	if err := l.start(); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

func (l *Lab) start() error {
	for _, n := range []string{l.Host, l.Provider} {
		if err := netns.Create(n); err != nil {
			return err
		}
	}
	err := AddVeth(End{NS: l.Host, Name: "up0", Addrs: []netip.Prefix{LabHost}},
		End{NS: l.Provider, Name: "up0", Addrs: []netip.Prefix{LabEndpoint}})
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	serverKey, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return err
	}
	if l.ClientKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		return err
	}
	l.ServerPub = serverKey.PublicKey()
	server := LabServer.Addr().String()
	cfg := &provider.Config{
		WireGuard: &provider.WireGuard{
			Interface: labProvIface, PrivateKey: serverKey.String(), ListenPort: LabWGPort,
			Addresses: []string{LabServer.String()},
			Peers:     []provider.Peer{{PublicKey: l.ClientKey.PublicKey().String(), AllowedIPs: []string{LabClient.String()}}},
		},
		DNS:      []string{server + ":53"},
		Zone:     map[string][]string{LabTarget: {server}},
		HTTP:     []string{server + ":80"},
		Greeting: LabGreeting,
	}
	err = Do(l.Provider, func() (err error) {
		l.prov, err = provider.Start(cfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("lab provider: %w", err)
	}
	return nil
}

// WriteConfig writes a wg-quick file and agent config for a confined
// namespace called name into dir, and returns the config path.
func (l *Lab) WriteConfig(dir, name string) (string, error) {
	wg := filepath.Join(dir, name+".conf")
	body := fmt.Sprintf("# Local demo provider (no VPN account needed)\n[Interface]\nPrivateKey = %s\nAddress = %s\nDNS = %s\n\n[Peer]\nPublicKey = %s\nEndpoint = %s\nAllowedIPs = 0.0.0.0/0\nPersistentKeepalive = 15\n",
		l.ClientKey, LabClient, LabServer.Addr(), l.ServerPub, netip.AddrPortFrom(LabEndpoint.Addr(), uint16(LabWGPort)))
	if err := os.WriteFile(wg, []byte(body), 0o600); err != nil {
		return "", fmt.Errorf("write wg-quick file: %w", err)
	}
	cfg := filepath.Join(dir, name+".json")
	js := fmt.Sprintf("{\n  \"name\": %q,\n  \"wireguard\": { \"configFile\": %q }\n}\n", name, wg)
	if err := os.WriteFile(cfg, []byte(js), 0o644); err != nil {
		return "", fmt.Errorf("write agent config: %w", err)
	}
	return cfg, nil
}

// StopPeer takes the provider's WireGuard peer down (a dead VPN server).
func (l *Lab) StopPeer() {
	if l.prov != nil {
		l.prov.StopWireGuard()
	}
}

// HostCommand returns a command that runs in the simulated host namespace
// (network namespace only; the mount namespace stays shared so namespaces
// the agent creates are visible to everyone).
func (l *Lab) HostCommand(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + names.Netns(l.Host), "--"}, argv...)...)
}

// Close removes everything the lab created, and whatever else is named
// after its ID.
func (l *Lab) Close() error {
	var errs []error
	if l.prov != nil {
		errs = append(errs, l.prov.Close())
		l.prov = nil
	}
	errs = append(errs, Remove(l.ID))
	return errors.Join(errs...)
}
