package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// The e2e harness (agent/testbed, tests/internal/{harness,observe,probe,agentproc}) driven inside the VM, with
// the provider's WireGuard in the kernel: the host namespace suite can only run wireguard-go.

// providerBin is tests/cmd/provider, injected by run.sh (the e2e harness's provider and
// logging decoy; here only its DNS and echo servers are used, the tunnel is kernel WireGuard).
const providerBin = "/opt/vpnc/bin/provider"

// provWG is the kernel WireGuard interface of the provider namespace (namespace-local name).
const provWG = "wgp"

// requireHarness skips unless the agent and the provider binary were injected.
func requireHarness(t *testing.T) {
	t.Helper()
	requireInjected(t, "run.sh builds agent/cmd/vpn-agent and tests/cmd/provider", agentBin, providerBin)
}

// kernelTopo builds the e2e topology (host, inet with decoys, lan, prov) with the
// provider's tunnel end in kernel WireGuard: a wireguard link created inside the provider
// namespace (its socket there), configured with `wg set`, plus the provider binary serving
// DNS and TCP/UDP echo on the tunnel addresses (a decoy-mode instance: no WireGuard
// section), logging every hit.
type kernelTopo struct {
	*harness.Topo
	Tunnel *harness.Process // DNS + echo on ProvTunnel4/6, reached only through the tunnel
}

func newKernelTopo(t *testing.T) *kernelTopo {
	t.Helper()
	tp := harness.New(t, harness.Options{ProviderBin: providerBin, NoProvider: true})
	key := filepath.Join(tp.Dir, "prov.key")
	if err := os.WriteFile(key, []byte(tp.ProvKey.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tp.Exec(t, tp.Prov, "ip", "link", "add", provWG, "type", "wireguard")
	tp.Exec(t, tp.Prov, "wg", "set", provWG, "listen-port", fmt.Sprint(testbed.WGPort), "private-key", key,
		"peer", tp.ClientKey.PublicKey().String(),
		"allowed-ips", testbed.ClientTunnel4.String()+"/32,"+testbed.ClientTunnel6.String()+"/128")
	tp.Exec(t, tp.Prov, "ip", "addr", "add", testbed.ProvTunnel4.String()+"/24", "dev", provWG)
	tp.Exec(t, tp.Prov, "ip", "addr", "add", testbed.ProvTunnel6.String()+"/64", "dev", provWG, "nodad")
	tp.Exec(t, tp.Prov, "ip", "link", "set", provWG, "up")
	if d := tp.Exec(t, tp.Prov, "ip", "-d", "link", "show", provWG); !strings.Contains(d, "wireguard") {
		t.Fatalf("provider link is not kernel WireGuard:\n%s", d)
	}
	cfg := &provider.Config{}
	cfg.Zone, cfg.DNS, cfg.TCPEcho, cfg.UDPEcho = testbed.TunnelServices()
	return &kernelTopo{Topo: tp, Tunnel: tp.StartProcess(t, "tunnel", tp.Prov, providerBin, cfg)}
}

// wgField runs `wg show IFACE FIELD` in ns and returns the fields of its lines.
func wgField(t *testing.T, tp *harness.Topo, ns, iface, field string) [][]string {
	t.Helper()
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(tp.Exec(t, ns, "wg", "show", iface, field)), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows = append(rows, f)
		}
	}
	return rows
}

// vmsummary prints a machine-readable line that tests/vm/ci.sh aggregates into the tier's
// closing summary (see docs/vm-tier.md).
func vmsummary(format string, args ...any) {
	fmt.Printf("vmsummary: "+format+"\n", args...)
}
