package harness

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// AgentOptions shape the agent config AgentConfig writes. The zero value
// is a userspace tunnel to the topology's provider with IPv4 and IPv6,
// strict DNS to the provider's resolver, no host link.
type AgentOptions struct {
	Name     string // namespace name; default Name(testbed.RoleConfined)
	Backend  string // default "userspace" (the test kernel has no WireGuard)
	IPv6     string // "", "auto", "tunnel", "block"
	DNSMode  string // "", "strict", "tunnel"
	HostLink bool   // enable the host link (testbed.HostLinkHost/testbed.HostLinkNS), accessible from testbed.LANNet4
	// PortMappings are host port -> namespace port (tcp), with HostLink.
	PortMappings map[int]int
	OpenPorts    []config.Port
	// WGQuick puts the tunnel in a wg-quick file (configFile) instead of
	// structured options.
	WGQuick bool
	// Edit, if set, may change the config before it is written.
	Edit func(*config.Config)
}

// AgentConfig writes the client private key (or a wg-quick file) and an
// agent JSON config into Dir with mode 0600, checks that the agent's own
// config package accepts it, and returns the config path and the parsed
// config.
func (tp *Topo) AgentConfig(t testing.TB, o AgentOptions) (string, *config.Config) {
	t.Helper()
	c := &config.Config{
		Name:    o.Name,
		Backend: o.Backend,
		IPv6:    o.IPv6,
		DNS:     config.DNS{Mode: o.DNSMode},
	}
	if c.Name == "" {
		c.Name = tp.Name(testbed.RoleConfined)
	}
	if c.Backend == "" {
		c.Backend = "userspace"
	}
	if o.WGQuick {
		path := filepath.Join(tp.Dir, c.Name+".conf")
		if err := tp.WriteWGQuick(path); err != nil {
			t.Fatal(err)
		}
		c.WireGuard.ConfigFile = path
	} else {
		keyPath := filepath.Join(tp.Dir, c.Name+".key")
		if err := os.WriteFile(keyPath, []byte(tp.ClientKey.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.WireGuard = config.WireGuard{
			PrivateKeyFile: keyPath,
			Addresses:      []string{testbed.ClientTunnel4.String() + "/32", testbed.ClientTunnel6.String() + "/128"},
			Peers: []config.Peer{{
				PublicKey:  tp.ProvKey.PublicKey().String(),
				Endpoint:   netip.AddrPortFrom(testbed.Endpoint4, testbed.WGPort).String(),
				AllowedIPs: []string{"0.0.0.0/0", "::/0"},
			}},
		}
		c.DNS.Servers = []string{testbed.ProvTunnel4.String()}
	}
	if o.HostLink {
		c.HostLink = config.HostLink{
			Enable:           true,
			HostAddress:      testbed.HostLinkHost.String(),
			NamespaceAddress: testbed.HostLinkNS.String(),
			AccessibleFrom:   []string{testbed.LANNet4.String()},
		}
		for from, to := range o.PortMappings {
			c.HostLink.PortMappings = append(c.HostLink.PortMappings, config.PortMapping{From: from, To: to, Protocol: "tcp"})
		}
	}
	c.OpenPorts = o.OpenPorts
	if o.Edit != nil {
		o.Edit(c)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(tp.Dir, c.Name+".json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadSpec(path, config.Options{}); err != nil {
		t.Fatalf("the agent's config package rejects the test config %s: %v\n%s", path, err, data)
	}
	return path, c
}

// WriteWGQuick writes a wg-quick file (mode 0600) for a client of the
// topology's provider: both tunnel addresses, DNS = the provider resolver,
// everything routed through the peer.
func (tp *Topo) WriteWGQuick(path string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "[Interface]\nPrivateKey = %s\nAddress = %s/32, %s/128\nDNS = %s\n\n",
		tp.ClientKey, testbed.ClientTunnel4, testbed.ClientTunnel6, testbed.ProvTunnel4)
	fmt.Fprintf(&b, "[Peer]\nPublicKey = %s\nEndpoint = %s\nAllowedIPs = 0.0.0.0/0, ::/0\n",
		tp.ProvKey.PublicKey(), netip.AddrPortFrom(testbed.Endpoint4, testbed.WGPort))
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write wg-quick file: %w", err)
	}
	return nil
}
