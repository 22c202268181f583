// Package harness is the end-to-end tests' glue around testbed.Topology:
// it builds a topology for a test (cleaned up with it), starts the
// provider and decoy as tests/cmd/provider processes, writes agent
// configs, and runs tools (ip, nft, wg, sysctl) in the topology's
// namespaces. What shells out lives here, not in the testbed.
package harness

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Options configure New.
type Options struct {
	// ProviderBin is the built tests/cmd/provider binary (required).
	ProviderBin string
	// NoProvider leaves the WireGuard provider stopped (start it with
	// Provider.Start).
	NoProvider bool
	// NATPMP turns on the provider's NAT-PMP gateway in this style
	// (provider.StyleProton or StyleRFC); Topo.NATPMP drives it.
	NATPMP string
	// NATPMPLifetime is the lease the gateway grants, in seconds (0: the
	// fixture's default, ProtonVPN's 60).
	NATPMPLifetime int
}

// Topo is one topology with its processes. All fields are read-only.
type Topo struct {
	*testbed.Topology
	Dir             string // configs, keys, logs (mode 0700)
	Provider, Decoy *Process
}

// New builds a topology, starts the decoy and (unless opts.NoProvider) the
// provider, and registers cleanup of everything named after its ID.
func New(t testing.TB, opts Options) *Topo {
	t.Helper()
	if opts.ProviderBin == "" {
		t.Fatal("harness.New: Options.ProviderBin is required")
	}
	tb, err := testbed.BuildTopology()
	if err != nil {
		t.Fatal(err)
	}
	tp := &Topo{Topology: tb, Dir: t.TempDir()}
	t.Cleanup(func() {
		for _, p := range []*Process{tp.Provider, tp.Decoy} {
			if p != nil {
				p.Kill()
			}
		}
		if err := tb.Close(); err != nil {
			t.Errorf("topology %s cleanup: %v", tb.ID, err)
		}
	})
	if err := tp.waitLinks(); err != nil {
		t.Fatalf("topology %s: %v", tb.ID, err)
	}
	if tp.Decoy, err = tp.process("decoy", tp.Inet, opts.ProviderBin, testbed.DecoyConfig(filepath.Join(tp.Dir, "decoy.log"))); err != nil {
		t.Fatal(err)
	}
	if err := tp.Decoy.Start(); err != nil {
		t.Fatal(err)
	}
	pcfg := tp.ProviderConfig(filepath.Join(tp.Dir, "provider.log"))
	if opts.NATPMP != "" {
		pcfg.NATPMP = tp.Topology.NATPMP(opts.NATPMP)
		pcfg.NATPMP.Control = tp.natpmpControl()
		pcfg.NATPMP.Lifetime = opts.NATPMPLifetime
	}
	if tp.Provider, err = tp.process("provider", tp.Prov, opts.ProviderBin, pcfg); err != nil {
		t.Fatal(err)
	}
	if !opts.NoProvider {
		if err := tp.Provider.Start(); err != nil {
			t.Fatal(err)
		}
	}
	return tp
}

func (tp *Topo) natpmpControl() string { return filepath.Join(tp.Dir, "natpmp.sock") }

// NATPMP drives the provider's NAT-PMP gateway (Options.NATPMP) through
// its control socket.
func (tp *Topo) NATPMP() provider.NATPMPControl { return provider.DialNATPMP(tp.natpmpControl()) }

// Exec runs argv in namespace ns and fails t on error.
func (tp *Topo) Exec(t testing.TB, ns string, argv ...string) string {
	t.Helper()
	out, err := Output(ns, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// Output runs argv with its network namespace set to ns (the mount
// namespace unchanged) and returns its combined output.
func Output(ns string, argv ...string) ([]byte, error) {
	var b strings.Builder
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &b, &b
	err := testbed.Start(ns, cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return []byte(b.String()), fmt.Errorf("%v in netns %s: %w: %s", argv, ns, err, trim(b.String()))
	}
	return []byte(b.String()), nil
}

func trim(s string) string {
	const max = 2000
	if len(s) > max {
		s = s[:max]
	}
	return s
}

// ReadFile returns the file's contents and fails t if it cannot be read.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Mounted reports whether namespace name is live (an nsfs bind mount at
// its path), not just a leftover file. It is the tests' own check, not
// the agent's.
func Mounted(name string) bool {
	var st unix.Statfs_t
	return unix.Statfs(names.Netns(name), &st) == nil && st.Type == unix.NSFS_MAGIC
}

// NetnsInode is namespace name as readlink /proc/self/ns/net shows it
// from inside ("net:[4026532...]").
func NetnsInode(t testing.TB, name string) string {
	t.Helper()
	return fmt.Sprintf("net:[%d]", Inode(t, names.Netns(name)))
}

// Inode is the inode number of the file at path (links followed: for
// /proc/PID/ns/net, the namespace's).
func Inode(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// NFT loads an nft script into namespace ns.
func (tp *Topo) NFT(ns, script string) error {
	f := filepath.Join(tp.Dir, fmt.Sprintf("nft-%s.nft", ns))
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		return err
	}
	if _, err := Output(ns, "nft", "-f", f); err != nil {
		return fmt.Errorf("nft in %s: %w", ns, err)
	}
	return nil
}

// BlockWG drops the provider's WireGuard UDP (both directions) in the
// provider namespace, as a dead or filtered endpoint would.
func (tp *Topo) BlockWG(t testing.TB) {
	t.Helper()
	if err := tp.Topology.BlockWG(); err != nil {
		t.Fatal(err)
	}
}

// UnblockWG undoes BlockWG.
func (tp *Topo) UnblockWG(t testing.TB) {
	t.Helper()
	if err := tp.Topology.UnblockWG(); err != nil {
		t.Fatal(err)
	}
}

// Sweep removes what dead test runs left behind (see testbed.Sweep).
func Sweep() ([]string, error) { return testbed.Sweep(testbed.TopologyPrefix) }

// waitLinks waits until every link answers ping over IPv4 and IPv6. A new
// veth is not IPv6-ready (solicited-node groups unjoined, so neighbour
// solicitations go unanswered) until linkwatch reports carrier, which the
// kernel rate-limits to about once a second.
func (tp *Topo) waitLinks() error {
	type hop struct {
		ns  string
		dst netip.Addr
	}
	hops := []hop{
		{tp.Host, testbed.InetHostSide4}, {tp.Host, testbed.InetHostSide6},
		{tp.Host, testbed.LANHost4}, {tp.Host, testbed.LANHost6},
		{tp.Inet, testbed.Endpoint4}, {tp.Inet, testbed.Endpoint6},
	}
	fns := make([]func() probe.Result, len(hops))
	for i, h := range hops {
		fns[i] = func() probe.Result {
			deadline := time.Now().Add(5 * time.Second)
			for {
				r := probe.Ping(h.ns, h.dst)
				if r.Reached() || time.Now().After(deadline) {
					return r
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	var bad []string
	for _, r := range probe.All(fns...) {
		if !r.Reached() {
			bad = append(bad, r.String())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("links not ready: %s", strings.Join(bad, "; "))
	}
	return nil
}

// StartProcess writes cfg and starts a provider-binary instance named name
// in namespace ns, stopped at cleanup. cfg.Log defaults to Dir/<name>.log.
func (tp *Topo) StartProcess(t testing.TB, name, ns, bin string, cfg *provider.Config) *Process {
	t.Helper()
	p := tp.NewProcess(t, name, ns, bin, cfg)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// NewProcess writes cfg and returns a provider-binary instance named name
// in namespace ns, not started (Start it when ns exists), stopped at t's
// cleanup. cfg.Log defaults to Dir/<name>.log.
func (tp *Topo) NewProcess(t testing.TB, name, ns, bin string, cfg *provider.Config) *Process {
	t.Helper()
	if cfg.Log == "" {
		cfg.Log = filepath.Join(tp.Dir, name+".log")
	}
	p, err := tp.process(name, ns, bin, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	return p
}

func (tp *Topo) process(name, ns, bin string, cfg *provider.Config) (*Process, error) {
	path := filepath.Join(tp.Dir, name+".json")
	if err := provider.WriteConfig(path, cfg); err != nil {
		return nil, err
	}
	return &Process{Name: name, NS: ns, Bin: bin, Config: path, Log: cfg.Log}, nil
}

// HijackRoutes points the namespace's default routes at the host
// link, as a process with CAP_NET_ADMIN inside could, and returns a func
// that puts the original default routes back.
func HijackRoutes(t testing.TB, ns string) (restore func()) {
	t.Helper()
	var saved [][]string
	for _, fam := range []string{"-4", "-6"} {
		out, _ := Output(ns, "ip", "-o", fam, "route", "show", "default")
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				saved = append(saved, append([]string{"ip", fam, "route", "replace"}, f...))
			}
		}
	}
	nsIf := names.NSVeth(ns)
	if _, err := Output(ns, "ip", "route", "replace", "default", "via", testbed.HostLinkHost.Addr().String(), "dev", nsIf); err != nil {
		t.Logf("could not add the escape route (the agent may be rebuilding): %v", err)
	}
	if _, err := Output(ns, "ip", "-6", "route", "replace", "default", "dev", nsIf); err != nil {
		t.Logf("no IPv6 escape route (expected: the agent disables IPv6 on the host link): %v", err)
	}
	return func() {
		Output(ns, "ip", "route", "del", "default", "dev", nsIf)
		Output(ns, "ip", "-6", "route", "del", "default", "dev", nsIf)
		for _, argv := range saved {
			if _, err := Output(ns, argv...); err != nil {
				t.Logf("restoring %v: %v", argv, err)
			}
		}
	}
}
