package engine

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// reloadChanges lists the calls made since upFake, without the state writes.
func reloadChanges(w *world) []string {
	return w.callsBut(func(c string) bool { return strings.HasPrefix(c, "files.state ") })
}

// Issue 12.12: a reload with new DNS servers and open ports swaps the
// kill switch (an atomic Apply: never removed, never created anew),
// rewrites resolv.conf in place, leaves the tunnel alone, and records the
// new config and what changed in the state file.
func TestReloadLiveParts(t *testing.T) {
	w, e, inst := upFake(t)
	next := testSpec(true)
	next.DNS = []netip.Addr{netip.MustParseAddr("10.2.0.53")}
	next.OpenTCP = []uint16{51413, 6881}
	changed, err := e.Reload(context.Background(), inst, next)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dns", "openPorts"}; !slices.Equal(changed, want) {
		t.Errorf("changed %q, want %q", changed, want)
	}
	if want := []string{"fw.apply " + killSwitch("torrent"), "files.rewrite-resolv torrent"}; !slices.Equal(reloadChanges(w), want) {
		t.Errorf("calls %q, want %q", reloadChanges(w), want)
	}
	noViolations(t, w)
	if inst.Spec != next {
		t.Error("the instance still runs the old spec")
	}
	st := w.lastState
	if st == nil || st.Reload == nil || !slices.Equal(st.Reload.Changed, changed) || st.Reload.Error != "" || st.ConfigDigest != Digest(Digests(next)) || st.Reload.Digest != st.ConfigDigest {
		t.Errorf("state after reload: %+v reload %+v", st, st.Reload)
	}
	if st.DNS[0] != "10.2.0.53" {
		t.Errorf("state DNS %q", st.DNS)
	}
}

// New peers (endpoint, allowed IPs, keepalive) reconfigure the tunnel and
// nothing else.
func TestReloadPeers(t *testing.T) {
	w, e, inst := upFake(t)
	next := testSpec(true)
	next.Peers[0].Endpoint = "198.51.100.7:51820"
	next.Peers[0].Keepalive = 25 * time.Second
	changed, err := e.Reload(context.Background(), inst, next)
	if err != nil || !slices.Equal(changed, []string{"peers"}) {
		t.Fatalf("changed %q, err %v", changed, err)
	}
	if want := []string{"tunnel.reconfigure " + next.Interface}; !slices.Equal(reloadChanges(w), want) {
		t.Errorf("calls %q, want %q", reloadChanges(w), want)
	}
	// The running tunnel itself is reconfigured (a userspace one records
	// a rotated key: wireguard.Reload), not only the link by its name.
	if len(w.reconfigured) != 1 || w.reconfigured[0] == nil || w.reconfigured[0] != inst.Tunnel {
		t.Errorf("reconfigured %v, want the instance's tunnel %v", w.reconfigured, inst.Tunnel)
	}
}

// A config that changes what cannot change live (addresses, MTU) changes
// nothing, says what differs and to run down and up, and is bad input.
func TestReloadRefusesRestartParts(t *testing.T) {
	w, e, inst := upFake(t)
	old := inst.Spec
	before := w.snapshot()
	next := testSpec(true)
	next.Addresses = []netip.Prefix{pfx("10.2.0.9/32")}
	next.MTU = 1280
	next.DNS = []netip.Addr{netip.MustParseAddr("10.2.0.53")} // live, but not alone
	_, err := e.Reload(context.Background(), inst, next)
	var rn *RestartNeeded
	if !errors.As(err, &rn) || !slices.Equal(rn.Parts, []string{"addresses", "mtu"}) {
		t.Fatalf("err %v, want RestartNeeded for addresses, mtu", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "addresses, mtu") || !strings.Contains(msg, "vpn-agent down torrent, then up") || strings.Contains(msg, "\n") {
		t.Errorf("message %q", msg)
	}
	if c := reloadChanges(w); len(c) != 0 || w.snapshot() != before || inst.Spec != old {
		t.Errorf("a refused reload changed something: calls %q", c)
	}
	if st := w.lastState; st == nil || st.Reload == nil || !st.Reload.BadInput || st.Reload.Error == "" || st.ConfigDigest != Digest(Digests(old)) {
		t.Errorf("state after a refused reload: %+v", st)
	}
}

// A reload that fails half-way puts back what it replaced; the kill
// switch is there throughout and the instance keeps the old spec.
func TestReloadFailureRestores(t *testing.T) {
	w, e, inst := upFake(t)
	old := inst.Spec
	w.fail["files.rewrite-resolv torrent"] = errInjected
	next := testSpec(true)
	next.DNS = []netip.Addr{netip.MustParseAddr("10.2.0.53")}
	if _, err := e.Reload(context.Background(), inst, next); !errors.Is(err, errInjected) {
		t.Fatalf("err %v", err)
	}
	if n := strings.Count(strings.Join(w.calls, ","), "fw.apply "+killSwitch("torrent")); n != 2 {
		t.Errorf("kill switch applied %d times, want 2 (the new one, then the old one back): %q", n, w.calls)
	}
	noViolations(t, w)
	if inst.Spec != old || !w.tables[killSwitch("torrent")] {
		t.Error("after a failed reload: spec replaced or kill switch gone")
	}
	if st := w.lastState; st == nil || st.Reload == nil || st.Reload.BadInput || !strings.Contains(st.Reload.Error, "injected") {
		t.Errorf("state: %+v", st.Reload)
	}
}

// The same config again changes nothing.
func TestReloadUnchanged(t *testing.T) {
	w, e, inst := upFake(t)
	if changed, err := e.Reload(context.Background(), inst, testSpec(true)); err != nil || changed != nil || len(reloadChanges(w)) != 0 {
		t.Errorf("changed %q err %v calls %q", changed, err, reloadChanges(w))
	}
}

// Digests tell every part apart and hold no key.
func TestDigests(t *testing.T) {
	a := testSpec(true)
	a.PrivateKey = [32]byte{1, 2, 3}
	b := testSpec(true)
	b.PrivateKey = [32]byte{1, 2, 4}
	b.HostLink = nil
	b.Backend = config.BackendUserspace
	live, restart := Changed(Digests(a), Digests(b))
	if !slices.Equal(live, []string{"privateKey"}) || !slices.Equal(restart, []string{"backend", "hostLink"}) {
		t.Errorf("live %q restart %q", live, restart)
	}
	for k, v := range Digests(a) {
		if len(v) != 16 || strings.Contains(v, "010203") {
			t.Errorf("digest %s=%q", k, v)
		}
	}
	if len(Digests(a)) != len(LiveParts)+len(RestartParts) {
		t.Errorf("%d digests, want one per part", len(Digests(a)))
	}
}

// Issue 21.1: every field of the resolved Spec belongs to exactly one
// part (SpecParts), and changing it changes that part's digest and no
// other; a new field without a part, or without a case here, fails.
func TestSpecPartsCoverSpec(t *testing.T) {
	other := testSpec(false)
	other.Peers[0].Endpoint = "198.51.100.2:51820"
	mutate := map[string]func(s *config.Spec){
		"Name":             func(s *config.Spec) { s.Name = "other" },
		"Backend":          func(s *config.Spec) { s.Backend = config.BackendUserspace },
		"Interface":        func(s *config.Spec) { s.Interface = "wg-other" },
		"PrivateKey":       func(s *config.Spec) { s.PrivateKey = [32]byte{9} },
		"Addresses":        func(s *config.Spec) { s.Addresses = []netip.Prefix{pfx("10.2.0.9/32")} },
		"MTU":              func(s *config.Spec) { s.MTU = 1280 },
		"ListenPort":       func(s *config.Spec) { s.ListenPort = 51999 },
		"FwMark":           func(s *config.Spec) { s.FwMark = 7 },
		"Peers":            func(s *config.Spec) { s.Peers[0].Keepalive = 25 * time.Second },
		"EndpointResolver": func(s *config.Spec) { s.EndpointResolver = netip.MustParseAddrPort("192.0.2.53:53") },
		"IPv6":             func(s *config.Spec) { s.IPv6 = true },
		"DNSMode":          func(s *config.Spec) { s.DNSMode = config.DNSTunnel },
		"DNS":              func(s *config.Spec) { s.DNS = []netip.Addr{netip.MustParseAddr("10.2.0.53")} },
		"DNSSearch":        func(s *config.Spec) { s.DNSSearch = []string{"example.org"} },
		"OpenTCP":          func(s *config.Spec) { s.OpenTCP = nil },
		"OpenUDP":          func(s *config.Spec) { s.OpenUDP = []uint16{6881} },
		"HostLink":         func(s *config.Spec) { s.HostLink = nil },
		"Probe": func(s *config.Spec) {
			s.Probe = &config.ProbeSpec{Target: netip.MustParseAddrPort("10.2.0.1:53"), Interval: time.Second, Failures: 1}
		},
		"PreferFirst":   func(s *config.Spec) { s.PreferFirst = !s.PreferFirst },
		"Standby":       func(s *config.Spec) { s.Standby = !s.Standby },
		"Metrics":       func(s *config.Spec) { s.Metrics = &config.Listen{Network: "tcp", Address: "127.0.0.1:9586"} },
		"PortForward":   func(s *config.Spec) { s.PortForward = &config.PortForwardSpec{Style: config.PortForwardProton} },
		"PacketBuffers": func(s *config.Spec) { s.PacketBuffers = 128 },
		"PinEndpoints":  func(s *config.Spec) { s.PinEndpoints = true },
		"Sidecar":       func(s *config.Spec) { s.Sidecar = &config.Sidecar{} },
		"Warnings":      func(s *config.Spec) { s.Warnings = []string{"PostUp ignored"} },
		"KeysLoaded":    func(s *config.Spec) { s.KeysLoaded = !s.KeysLoaded },
		"Pool":          func(s *config.Spec) { s.Pool = []*config.Spec{s, other} },
		"Server":        func(s *config.Spec) { s.Server = 1 },
	}
	parts := append(slices.Clone(LiveParts), RestartParts...)
	covered := map[string]bool{}
	st := reflect.TypeFor[config.Spec]()
	for i := range st.NumField() {
		name := st.Field(i).Name
		part, ok := SpecParts[name]
		if !ok {
			t.Errorf("config.Spec.%s has no part in SpecParts: a reload would neither apply nor refuse it", name)
			continue
		}
		if part != "" && !slices.Contains(parts, part) {
			t.Errorf("config.Spec.%s: part %q is neither live nor a restart part", name, part)
		}
		covered[part] = true
		if !st.Field(i).IsExported() {
			continue // fromFile: TestReloadPool (agent/cli) changes the server's file
		}
		m, ok := mutate[name]
		if !ok {
			t.Errorf("config.Spec.%s: no case here", name)
			continue
		}
		s := testSpec(true)
		before := Digests(s)
		m(s)
		live, restart := Changed(before, Digests(s))
		got := append(live, restart...)
		if want := []string{part}; (part == "" && len(got) != 0) || (part != "" && !slices.Equal(got, want)) {
			t.Errorf("changing config.Spec.%s changed parts %q, want %q", name, got, part)
		}
	}
	for _, p := range parts {
		if !covered[p] {
			t.Errorf("part %s covers no field of config.Spec", p)
		}
	}
	if len(SpecParts) != st.NumField() {
		t.Errorf("SpecParts has %d entries, config.Spec %d fields", len(SpecParts), st.NumField())
	}
}

// A changed hostLink.allowedEgress (issue 24.1) is a hostLink change: the
// reload is refused as a whole and nothing changes, the kill switch and
// the host table included (down and up apply it).
func TestReloadRefusesAllowedEgress(t *testing.T) {
	w, e, inst := upFake(t)
	before, old := w.snapshot(), inst.Spec
	next := testSpec(true)
	next.HostLink.AllowedEgress = []config.EgressSpec{{Dst: netip.MustParsePrefix("192.168.1.20/32"), Proto: "tcp", Ports: []uint16{445}}}
	_, err := e.Reload(context.Background(), inst, next)
	var rn *RestartNeeded
	if !errors.As(err, &rn) || !slices.Equal(rn.Parts, []string{"hostLink"}) {
		t.Fatalf("err %v, want RestartNeeded for hostLink", err)
	}
	if c := reloadChanges(w); len(c) != 0 || w.snapshot() != before || inst.Spec != old {
		t.Errorf("a refused reload changed something: calls %q", c)
	}
}

// The daemon's own parts (then) change before the outcome that `up` reads
// is recorded: a "reloaded" in the state file means all of it applied.
func TestReloadThenBeforeRecord(t *testing.T) {
	w, e, inst := upFake(t)
	next := testSpec(true)
	next.DNS = []netip.Addr{netip.MustParseAddr("10.2.0.53")}
	var ran []string
	var recorded bool
	_, err := e.Reload(context.Background(), inst, next, func(changed []string) {
		ran = changed
		recorded = w.lastState != nil && w.lastState.Reload != nil
	})
	if err != nil || !slices.Equal(ran, []string{"dns"}) || recorded {
		t.Fatalf("then got %q (err %v); the outcome recorded before it: %v", ran, err, recorded)
	}
	if st := w.lastState; st == nil || st.Reload == nil || !slices.Equal(st.Reload.Changed, ran) {
		t.Errorf("no outcome recorded after then: %+v", st)
	}
	// A refused reload runs nothing.
	ran = nil
	bad := testSpec(true)
	bad.Name = "other"
	if _, err := e.Reload(context.Background(), inst, bad, func(c []string) { ran = c }); err == nil || ran != nil {
		t.Errorf("a refused reload: err %v, then ran with %q", err, ran)
	}
}
