package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// sidecarSpec is the test namespace in sidecar mode: the namespace it
// names is the one the agent runs in (it exists, the agent made nothing).
func sidecarSpec(w *world) *config.Spec {
	s := testSpec(false)
	s.Name, s.Interface, s.Backend = "pod", names.Tunnel("pod"), config.BackendAuto
	s.Sidecar = &config.Sidecar{}
	s.ListenPort = names.SidecarListenPort // as config resolves it in sidecar mode
	w.ns[s.Name] = true
	return s
}

// kernelRule says whether r lets out packets by the tunnel's mark and
// listen port (the kernel backend's, policy.AgentSocket.Kernel).
func kernelRule(r *policy.Ruleset, s *config.Spec) bool {
	want := fmt.Sprintf("meta mark 0x%08x udp sport %d ", s.DeviceMark(), s.ListenPort)
	return strings.Contains(r.Render(), want)
}

// Issue 23: in sidecar mode Up makes no namespace and no resolver files;
// the kill switch is loaded in the agent's own namespace before the tunnel
// and its routing; the backend is the kernel when it has WireGuard (the
// fake's), and the kill switch then knows the kernel's packets by the
// tunnel's mark and port; the state file says sidecar.
// A stop removes the routing, the tunnel and the state, and leaves the
// kill switch (the fake firewall reports any removal of it).
func TestSidecarUpAndStopKeepTheKillSwitch(t *testing.T) {
	w := newWorld()
	e := w.engine()
	s := sidecarSpec(w)
	inst, err := e.Up(context.Background(), s, "")
	if err != nil {
		t.Fatal(err)
	}
	ks := netns.SelfPath + " " + names.Table
	if !w.tables[ks] {
		t.Fatalf("no kill switch in the agent's own namespace (%s); tables: %v", netns.SelfPath, w.tables)
	}
	for _, op := range []string{"netns.create", "files.resolver", "hostlink.create", "links.configure"} {
		if w.index(op) >= 0 {
			t.Errorf("sidecar Up called %s: %v", op, w.calls)
		}
	}
	order := []int{w.index("fw.apply " + netns.SelfPath), w.index("tunnel.create"), w.index("links.sidecar " + s.Interface), w.index("files.state")}
	if slices.Contains(order, -1) || !slices.IsSorted(order) {
		t.Errorf("want kill switch, tunnel, routing, state in that order: %v", w.calls)
	}
	if inst.Backend != config.BackendKernel || w.lastState.Mode != ModeSidecar {
		t.Errorf("backend %s, state mode %q: want kernel, %q", inst.Backend, w.lastState.Mode, ModeSidecar)
	}
	if !kernelRule(w.lastRules, s) {
		t.Errorf("kernel backend: the kill switch does not let out the tunnel's marked packets from its port:\n%s", w.lastRules.Render())
	}
	if err := e.Teardown(inst); err != nil {
		t.Fatal(err)
	}
	if !w.tables[ks] {
		t.Errorf("the stop removed the kill switch: %v", w.calls)
	}
	if w.index("links.sidecar-remove pod") < 0 || w.state["pod"] || w.owner["pod"] {
		t.Errorf("the stop left the routing or the state: %v\n%s", w.calls, w.snapshot())
	}
	if len(w.violations) > 0 {
		t.Errorf("violations: %v", w.violations)
	}
}

// With the userspace backend the kill switch has no mark-and-port rule:
// the agent's own socket is known by its cgroup.
func TestSidecarUserspaceHasNoPortRule(t *testing.T) {
	w := newWorld()
	e := w.engine()
	s := sidecarSpec(w)
	s.Backend = config.BackendUserspace
	inst, err := e.Up(context.Background(), s, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Teardown(inst)
	if inst.Backend != config.BackendUserspace || kernelRule(w.lastRules, s) || strings.Contains(w.lastRules.Render(), "meta mark") {
		t.Errorf("userspace backend %s: the kill switch matches a mark:\n%s", inst.Backend, w.lastRules.Render())
	}
}

// A sidecar Up that fails after the tunnel undoes the routing and the
// tunnel, and keeps the kill switch.
func TestSidecarRollbackKeepsTheKillSwitch(t *testing.T) {
	w := newWorld()
	e := w.engine()
	s := sidecarSpec(w)
	w.fail["files.state pod"] = errInjected
	if _, err := e.Up(context.Background(), s, ""); !errors.Is(err, errInjected) {
		t.Fatalf("Up: %v, want the injected error", err)
	}
	if !w.tables[netns.SelfPath+" "+names.Table] {
		t.Errorf("the rollback removed the kill switch: %v", w.calls)
	}
	if w.tunnels["pod/"+s.Interface] || w.index("links.sidecar-remove pod") < 0 {
		t.Errorf("the rollback left the tunnel or the routing: %v", w.calls)
	}
	if v := strings.Join(w.violations, "; "); v != "" {
		t.Errorf("violations: %s", v)
	}
}
