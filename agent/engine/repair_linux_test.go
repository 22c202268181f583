package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/health"
)

func report(kinds ...health.Kind) *health.Report {
	r := &health.Report{Name: "torrent"}
	for _, k := range kinds {
		r.Add(k, "problem %d", k)
	}
	return r
}

// Given a report with problem X, Repair does repair Y and nothing else;
// the kill switch is never removed or opened, and it is in place before
// any link carries traffic.
func TestRepairDecisions(t *testing.T) {
	s := testSpec(true)
	ks, host := killSwitch(s.Name), hostTable(s.Name)
	tunnelRepair := []string{"tunnel.destroy " + s.Interface, "tunnel.create " + s.Interface, "links.configure " + s.Interface}
	for _, c := range []struct {
		name  string
		kinds []health.Kind
		// breakIt makes the fake world match the report.
		breakIt func(w *world, inst *Instance)
		want    []string // the calls, in order
	}{
		{"healthy", nil, nil, nil},
		{"kill switch deleted", []health.Kind{health.PolicyMissing},
			func(w *world, _ *Instance) { delete(w.tables, ks) },
			[]string{"fw.apply " + ks}},
		{"kill switch changed", []health.Kind{health.PolicyChanged}, nil,
			[]string{"fw.apply " + ks}},
		{"tunnel link deleted", []health.Kind{health.TunnelMissing},
			func(w *world, _ *Instance) { delete(w.tunnels, s.Name+"/"+s.Interface) },
			tunnelRepair},
		{"data plane dead", []health.Kind{health.DataPlaneDead},
			func(_ *world, inst *Instance) { close(inst.Tunnel.(*fakeTunnel).done) },
			[]string{"tunnel.destroy " + s.Interface, "tunnel.create " + s.Interface, "links.configure " + s.Interface}},
		{"routes wrong", []health.Kind{health.RoutesWrong}, nil,
			[]string{"links.configure " + s.Interface}},
		{"routes wrong with the tunnel missing: one tunnel repair", []health.Kind{health.TunnelMissing, health.RoutesWrong},
			func(w *world, _ *Instance) { delete(w.tunnels, s.Name+"/"+s.Interface) },
			tunnelRepair},
		{"kill switch and tunnel gone: the kill switch first", []health.Kind{health.TunnelMissing, health.PolicyMissing},
			func(w *world, _ *Instance) { delete(w.tunnels, s.Name+"/"+s.Interface); delete(w.tables, ks) },
			append([]string{"fw.apply " + ks}, tunnelRepair...)},
		{"host link deleted", []health.Kind{health.HostLinkMissing},
			func(w *world, _ *Instance) { delete(w.hostLinks, s.HostLink.HostIf) },
			[]string{"hostlink.delete " + s.HostLink.HostIf, "hostlink.create " + s.HostLink.HostIf, "forwarding.enable " + s.Name, "fw.apply " + host}},
		{"host table deleted", []health.Kind{health.HostPolicyMissing},
			func(w *world, _ *Instance) { delete(w.tables, host) },
			[]string{"fw.apply " + host}},
		{"host link and table: the table once", []health.Kind{health.HostLinkMissing, health.HostPolicyMissing},
			func(w *world, _ *Instance) { delete(w.hostLinks, s.HostLink.HostIf); delete(w.tables, host) },
			[]string{"hostlink.delete " + s.HostLink.HostIf, "hostlink.create " + s.HostLink.HostIf, "forwarding.enable " + s.Name, "fw.apply " + host}},
		{"namespace deleted: rebuilt, kill switch before the tunnel", []health.Kind{health.NamespaceMissing},
			func(w *world, _ *Instance) { fakeNS{w}.Delete(s.Name); w.calls = nil },
			[]string{"tunnel.destroy " + s.Interface, "netns.create " + s.Name, "fw.create " + ks, "files.resolver " + s.Name,
				"tunnel.create " + s.Interface, "links.configure " + s.Interface, "hostlink.create " + s.HostLink.HostIf, "forwarding.enable " + s.Name, "fw.apply " + host, "files.state " + s.Name}},
		{"stale handshake: nothing to repair", []health.Kind{health.HandshakeStale}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, e, inst := upFake(t)
			healthy := w.snapshot()
			if c.breakIt != nil {
				c.breakIt(w, inst)
			}
			if err := e.Repair(context.Background(), inst, report(c.kinds...)); err != nil {
				t.Fatalf("Repair: %v", err)
			}
			if !slices.Equal(w.calls, c.want) {
				t.Errorf("repair calls:\n  %s\nwant:\n  %s", strings.Join(w.calls, "\n  "), strings.Join(c.want, "\n  "))
			}
			if got := w.snapshot(); got != healthy {
				t.Errorf("after the repair:\n%s\nwant the healthy world:\n%s", got, healthy)
			}
			noViolations(t, w)
		})
	}
}

// A repair that fails (the tunnel cannot be recreated) still leaves the
// kill switch in place, and says what failed.
func TestRepairFailureKeepsKillSwitch(t *testing.T) {
	w, e, inst := upFake(t)
	s := inst.Spec
	delete(w.tunnels, s.Name+"/"+s.Interface)
	delete(w.tables, killSwitch(s.Name))
	w.fail["tunnel.create "+s.Interface] = errInjected
	err := e.Repair(context.Background(), inst, report(health.PolicyMissing, health.TunnelMissing))
	if err == nil || !strings.Contains(err.Error(), "repair tunnel") {
		t.Fatalf("Repair: %v, want the tunnel repair's failure", err)
	}
	if !w.tables[killSwitch(s.Name)] {
		t.Error("the kill switch is not in place after a failed repair")
	}
	noViolations(t, w)
}
