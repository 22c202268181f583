package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.org/x/sys/unix"
)

// world is a fake kernel and file system for the engine: what exists, the
// calls made, in order, and the violations of the kill-switch invariants
// it saw (checked at the moment of each call, not afterwards).
type world struct {
	ns         map[string]bool // namespaces
	tables     map[string]bool // nsPath + " " + table
	lastRules  *policy.Ruleset // the last ruleset Apply loaded
	tunnels    map[string]bool // namespace/interface
	configured map[string]bool // tunnels that carry traffic (addresses, up, routes)
	hostLinks  map[string]bool
	aliases    map[string]string // host link -> its alias (the agent's mark)
	resolver   map[string]bool
	state      map[string]bool
	owner      map[string]bool // owner marks
	forwarding map[string]bool // users of the host's ip_forward

	calls      []string
	violations []string
	lastState  *State // the last state file written
	// reconfigured is the tunnel each Reconfigure was given.
	reconfigured []wireguard.Tunnel
	// fail makes the named call fail (before it changes anything).
	fail map[string]error
}

func newWorld() *world {
	return &world{
		ns: map[string]bool{}, tables: map[string]bool{}, tunnels: map[string]bool{},
		configured: map[string]bool{}, hostLinks: map[string]bool{}, resolver: map[string]bool{},
		state: map[string]bool{}, fail: map[string]error{}, aliases: map[string]string{}, owner: map[string]bool{}, forwarding: map[string]bool{},
	}
}

// call records a call and returns its injected failure, if any.
func (w *world) call(op string) error {
	w.calls = append(w.calls, op)
	return w.fail[op]
}

// set records op and, unless it fails, marks key in m.
func (w *world) set(op string, m map[string]bool, key string) error {
	if err := w.call(op); err != nil {
		return err
	}
	m[key] = true
	return nil
}

// remove records op and, unless it fails, removes key from every map in ms.
func (w *world) remove(op, key string, ms ...map[string]bool) error {
	if err := w.call(op); err != nil {
		return err
	}
	for _, m := range ms {
		delete(m, key)
	}
	return nil
}

// removeHostLink records op+hostIf and, unless it fails, removes the host
// link and its alias.
func (w *world) removeHostLink(op, hostIf string) error {
	if err := w.remove(op+hostIf, hostIf, w.hostLinks); err != nil {
		return err
	}
	delete(w.aliases, hostIf)
	return nil
}

func (w *world) violate(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

func killSwitch(ns string) string { return names.Netns(ns) + " " + names.Table }

func hostTable(ns string) string { return " " + names.HostTable(ns) }

// snapshot lists everything that exists, sorted, for comparisons.
func (w *world) snapshot() string {
	var out []string
	for what, m := range map[string]map[string]bool{"netns": w.ns, "table": w.tables, "tunnel": w.tunnels, "configured": w.configured, "hostlink": w.hostLinks, "resolver": w.resolver, "state": w.state, "owner": w.owner, "ip_forward": w.forwarding} {
		for k, v := range m {
			if v {
				out = append(out, what+" "+k)
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// callsBut lists the calls made, in order, without those skip matches.
func (w *world) callsBut(skip func(call string) bool) []string {
	var out []string
	for _, c := range w.calls {
		if !skip(c) {
			out = append(out, c)
		}
	}
	return out
}

// index returns the position of the first call with prefix op, or -1.
func (w *world) index(op string) int {
	return slices.IndexFunc(w.calls, func(c string) bool { return strings.HasPrefix(c, op) })
}

func (w *world) engine() *Engine {
	return &Engine{
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		ProbeKernel: func() error { return nil },
		system: system{
			ns: fakeNS{w}, fw: fakeFirewall{w}, links: fakeLinks{w}, tunnels: fakeTunnels{w}, files: fakeFiles{w},
			lock:  func(string) (*Lock, error) { return &Lock{}, w.call("lock") },
			agent: func() (policy.AgentSocket, error) { return policy.AgentSocket{CgroupID: 4242, Level: 2}, nil },
		},
	}
}

type fakeNS struct{ *world }

func (f fakeNS) Exists(name string) bool { return f.ns[name] }
func (f fakeNS) Create(name string) error {
	if err := f.call("netns.create " + name); err != nil {
		return err
	}
	if f.ns[name] {
		return unix.EEXIST
	}
	f.ns[name] = true
	return nil
}
func (f fakeNS) Delete(name string) error {
	if err := f.call("netns.delete " + name); err != nil {
		return err
	}
	// Everything in the namespace goes with it.
	delete(f.ns, name)
	delete(f.tables, killSwitch(name))
	for k := range f.tunnels {
		if strings.HasPrefix(k, name+"/") {
			delete(f.tunnels, k)
			delete(f.configured, k)
		}
	}
	return nil
}

type fakeFirewall struct{ *world }

func (f fakeFirewall) Create(r *policy.Ruleset, nsPath string) error {
	if err := f.call("fw.create " + nsPath + " " + r.Name); err != nil {
		return err
	}
	if f.tables[nsPath+" "+r.Name] {
		return unix.EEXIST
	}
	f.tables[nsPath+" "+r.Name] = true
	return nil
}
func (f fakeFirewall) Apply(r *policy.Ruleset, nsPath string) error {
	f.lastRules = r
	return f.set("fw.apply "+nsPath+" "+r.Name, f.tables, nsPath+" "+r.Name)
}
func (f fakeFirewall) SetForwarded(nsPath, table string, fwd policy.Forwarded) error {
	if !f.tables[nsPath+" "+table] {
		return errors.New("no such table")
	}
	return f.call("fw.forward " + nsPath + " " + table + " " + fwd.String())
}
func (f fakeFirewall) Remove(nsPath, table string) error {
	if nsPath != "" || table == names.Table {
		f.violate("fw.remove %s %s: the kill switch was removed", nsPath, table)
	}
	return f.remove("fw.remove "+nsPath+" "+table, nsPath+" "+table, f.tables)
}

type fakeLinks struct{ *world }

func (f fakeLinks) ConfigureTunnel(s *config.Spec) error {
	if err := f.call("links.configure " + s.Interface); err != nil {
		return err
	}
	if !f.tables[killSwitch(s.Name)] {
		f.violate("tunnel %s carries traffic without the kill switch", s.Interface)
	}
	if !f.tunnels[s.Name+"/"+s.Interface] {
		return fmt.Errorf("find %q: no such link", s.Interface)
	}
	f.configured[s.Name+"/"+s.Interface] = true
	return nil
}
func (f fakeLinks) ConfigureSidecar(s *config.Spec) error {
	if err := f.call("links.sidecar " + s.Interface); err != nil {
		return err
	}
	if !f.tables[netns.SelfPath+" "+names.Table] {
		f.violate("tunnel %s carries traffic without the kill switch", s.Interface)
	}
	if !f.tunnels[s.Name+"/"+s.Interface] {
		return fmt.Errorf("find %q: no such link", s.Interface)
	}
	f.configured[s.Name+"/"+s.Interface] = true
	return nil
}
func (f fakeLinks) RemoveSidecarRoutes(name string) error {
	if err := f.call("links.sidecar-remove " + name); err != nil {
		return err
	}
	for k := range f.configured {
		if strings.HasPrefix(k, name+"/") {
			delete(f.configured, k)
		}
	}
	return nil
}
func (f fakeLinks) PodInterfaces(*config.Spec) ([]string, error) { return []string{"eth0"}, nil }
func (f fakeLinks) CreateHostLink(s *config.Spec) (func() error, error) {
	if err := f.call("hostlink.create " + s.HostLink.HostIf); err != nil {
		return nil, err
	}
	if !f.tables[killSwitch(s.Name)] {
		f.violate("host link %s up without the kill switch", s.HostLink.HostIf)
	}
	f.hostLinks[s.HostLink.HostIf] = true
	f.aliases[s.HostLink.HostIf] = names.LinkAlias(s.Name)
	return func() error { return f.DeleteHostLink(s.HostLink.HostIf) }, nil
}
func (f fakeLinks) DeleteHostLink(hostIf string) error {
	return f.removeHostLink("hostlink.delete ", hostIf)
}
func (f fakeLinks) EnableForwarding(ns string) error {
	return f.set("forwarding.enable "+ns, f.forwarding, ns)
}
func (f fakeLinks) ReleaseForwarding(ns string) error {
	return f.remove("forwarding.release "+ns, ns, f.forwarding)
}
func (f fakeLinks) HostLinkAlias(name string) (bool, string) {
	return f.hostLinks[name], f.aliases[name]
}

type fakeTunnels struct{ *world }

func (f fakeTunnels) Ensure(_ context.Context, s *config.Spec, b config.Backend, _ *slog.Logger) (wireguard.Tunnel, error) {
	key := s.Name + "/" + s.Interface
	op := "tunnel.create "
	if f.tunnels[key] {
		op = "tunnel.adopt "
	}
	if err := f.call(op + s.Interface); err != nil {
		return nil, err
	}
	if !f.ns[s.Name] {
		return nil, fmt.Errorf("netns %s: no such namespace", s.Name)
	}
	f.tunnels[key] = true
	return &fakeTunnel{w: f.world, ns: s.Name, name: s.Interface, backend: b, done: make(chan struct{})}, nil
}
func (f fakeTunnels) Reconfigure(_ context.Context, t wireguard.Tunnel, s *config.Spec) error {
	if err := f.call("tunnel.reconfigure " + s.Interface); err != nil {
		return err
	}
	f.reconfigured = append(f.reconfigured, t)
	if !f.tunnels[s.Name+"/"+s.Interface] {
		return fmt.Errorf("configure wireguard %q: no such device", s.Interface)
	}
	return nil
}
func (f fakeTunnels) Destroy(ns, iface string) error {
	return f.remove("tunnel.destroy "+iface, ns+"/"+iface, f.tunnels, f.configured)
}
func (f fakeTunnels) RemoveStaleHostLink(ns, iface string) error {
	return f.removeHostLink("tunnel.remove-stale ", iface)
}

// fakeTunnel is a tunnel in the fake world. Kill closes Done, as a
// userspace data plane does when its link is deleted.
type fakeTunnel struct {
	w        *world
	ns, name string
	backend  config.Backend
	done     chan struct{}
}

func (t *fakeTunnel) Backend() config.Backend { return t.backend }
func (t *fakeTunnel) Name() string            { return t.name }
func (t *fakeTunnel) Done() <-chan struct{}   { return t.done }
func (t *fakeTunnel) Destroy() error          { return fakeTunnels{t.w}.Destroy(t.ns, t.name) }
func (t *fakeTunnel) Stop() (<-chan struct{}, error) {
	return closedChan, t.Destroy()
}

type fakeFiles struct{ *world }

func (f fakeFiles) WriteResolver(s *config.Spec) (bool, error) {
	created := !f.resolver[s.Name]
	if err := f.set("files.resolver "+s.Name, f.resolver, s.Name); err != nil {
		return false, err
	}
	return created, nil
}
func (f fakeFiles) RemoveResolver(name string) error {
	return f.remove("files.remove-resolver "+name, name, f.resolver)
}
func (f fakeFiles) RewriteResolvConf(s *config.Spec) error {
	if err := f.call("files.rewrite-resolv " + s.Name); err != nil {
		return err
	}
	if !f.resolver[s.Name] {
		return fmt.Errorf("rewrite resolv.conf of %s: no such file", s.Name)
	}
	return nil
}
func (f fakeFiles) WriteState(st *State) error {
	if err := f.set("files.state "+st.Name, f.state, st.Name); err != nil {
		return err
	}
	f.lastState = st
	return nil
}
func (f fakeFiles) RemoveState(name string) error {
	return f.remove("files.remove-state "+name, name, f.state)
}
func (f fakeFiles) RemoveUAPISocket(iface string) error { return f.call("files.remove-uapi " + iface) }
func (f fakeFiles) RemoveStateDir(name string) error {
	return f.remove("files.remove-statedir "+name, name, f.state, f.owner)
}
func (f fakeFiles) Owned(name string) bool { return f.owner[name] }
func (f fakeFiles) WriteOwner(name string) error {
	if err := f.call("files.owner " + name); err != nil {
		return err
	}
	// Nothing of the namespace may exist before its mark.
	if f.state[name] || f.resolver[name] || f.tables[killSwitch(name)] {
		f.violate("owner mark of %s written after the agent made something of it", name)
	}
	f.owner[name] = true
	return nil
}
func (f fakeFiles) RemoveOwner(name string) error {
	return f.remove("files.remove-owner "+name, name, f.owner)
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// testSpec is a resolved spec with a host link (hostLink false: without).
func testSpec(hostLink bool) *config.Spec {
	s := &config.Spec{
		Name:      "torrent",
		Backend:   config.BackendKernel,
		Interface: names.Tunnel("torrent"),
		Addresses: []netip.Prefix{pfx("10.2.0.2/32")},
		MTU:       config.DefaultMTU,
		Peers:     []config.PeerSpec{{Endpoint: "198.51.100.1:51820", AllowedIPs: []netip.Prefix{pfx("0.0.0.0/0")}}},
		DNSMode:   config.DNSStrict,
		DNS:       []netip.Addr{netip.MustParseAddr("10.2.0.1")},
		OpenTCP:   []uint16{51413},
	}
	if hostLink {
		s.HostLink = &config.HostLinkSpec{
			HostIf: names.HostVeth(s.Name), NSIf: names.NSVeth(s.Name),
			HostAddr: pfx("10.200.1.1/30"), NSAddr: pfx("10.200.1.2/30"),
			AccessibleFrom: []netip.Prefix{pfx("192.168.1.0/24")},
			Mappings:       []config.Mapping{{HostPort: 9091, NSPort: 9091, Proto: "tcp"}},
		}
	}
	return s
}

// upFake brings the test namespace (with a host link) up in a fresh fake
// world and forgets the calls that took.
func upFake(t *testing.T) (*world, *Engine, *Instance) {
	t.Helper()
	w := newWorld()
	e := w.engine()
	inst, err := e.Up(context.Background(), testSpec(true), "")
	if err != nil {
		t.Fatal(err)
	}
	w.calls = nil
	return w, e, inst
}
