package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// The forwarded port lives in the kill switch's sets: a repair (a table
// replace) keeps it, a failover closes it with the old server's kill switch
// in the same replace, and a failed failover puts it back with the rest.
func TestForwardedPorts(t *testing.T) {
	p, sw, e, inst, open := upForwarded(t)
	if sw.fwd != open.String() || !inst.Forwarded().Equal(open) {
		t.Fatalf("after SetForwarded: kill switch %s, instance %s", sw.fwd, inst.Forwarded())
	}
	if sw.index("fw.apply") >= 0 {
		t.Fatal("SetForwarded replaced the table")
	}
	if err := e.Repair(context.Background(), inst, report(health.PolicyChanged)); err != nil {
		t.Fatal(err)
	}
	if sw.fwd != open.String() {
		t.Fatalf("the repair's replace dropped the forwarded port: %s", sw.fwd)
	}

	sw.fail["links.configure "+p[1].Interface] = errors.New("boom")
	if err := e.Switch(context.Background(), inst, p[1]); err == nil {
		t.Fatal("the switch did not fail")
	}
	if sw.fwd != open.String() || !inst.Forwarded().Equal(open) {
		t.Fatalf("a failed switch did not put the forwarded port back: kill switch %s, instance %s", sw.fwd, inst.Forwarded())
	}
	delete(sw.fail, "links.configure "+p[1].Interface)
	if err := e.Switch(context.Background(), inst, p[1]); err != nil {
		t.Fatal(err)
	}
	if sw.fwd != "none" || !inst.Forwarded().IsZero() {
		t.Fatalf("after the switch the old server's port is still open: kill switch %s, instance %s", sw.fwd, inst.Forwarded())
	}
	// A lease the old server granted, arriving late, opens nothing.
	if err := e.SetForwarded(inst, 0, open); err == nil || sw.fwd != "none" {
		t.Fatalf("a lease of the previous server was opened (err %v, kill switch %s)", err, sw.fwd)
	}
	if err := e.SetForwarded(inst, inst.ForwardGen(), open); err != nil || sw.fwd != open.String() {
		t.Fatalf("the new server's lease: err %v, kill switch %s", err, sw.fwd)
	}
	if len(sw.violations) > 0 {
		t.Fatalf("violations: %v", sw.violations)
	}

	// Without port forwarding there is nothing to open.
	_, e2, plain := upFake(t)
	if err := e2.SetForwarded(plain, plain.ForwardGen(), open); err == nil {
		t.Fatal("SetForwarded without portForwarding succeeded")
	}
}

// upForwarded brings a pool with port forwarding up in a fake world, with
// port 40001 forwarded (open).
func upForwarded(t *testing.T) ([]*config.Spec, *switchWorld, *Engine, *Instance, policy.Forwarded) {
	t.Helper()
	p := pool()
	for _, s := range p {
		s.PortForward = &config.PortForwardSpec{Gateway: s.DNS[0], Style: config.PortForwardProton, Protocols: []string{"tcp", "udp"}, Lifetime: time.Minute}
	}
	sw, e, inst, _ := upSwitchFakeWith(t, p)
	open := policy.Forwarded{TCP: []uint16{40001}, UDP: []uint16{40001}}
	if err := e.SetForwarded(inst, inst.ForwardGen(), open); err != nil {
		t.Fatal(err)
	}
	return p, sw, e, inst, open
}

// Issue 21.1: a reload that changes the port forwarding closes the old
// lease's port in the same replace of the kill switch (a new generation,
// as a failover): a late lease of the old manager opens nothing, and the
// kill switch is never wider than a lease. A reload that leaves it alone
// keeps the port open.
func TestReloadPortForwarding(t *testing.T) {
	p, sw, e, inst, open := upForwarded(t)
	// The same servers, changed by edit.
	reloaded := func(edit func(*config.Spec)) []*config.Spec {
		var next []*config.Spec
		for _, s := range p {
			c := *s
			pf := *s.PortForward
			c.PortForward = &pf
			edit(&c)
			next = append(next, &c)
		}
		for _, s := range next {
			s.Pool = next
		}
		return next
	}
	// DNS search domains only: the lease stays.
	next := reloaded(func(s *config.Spec) { s.DNSSearch = []string{"example.org"} })
	gen := inst.ForwardGen()
	if changed, err := e.Reload(context.Background(), inst, next[0]); err != nil || len(changed) != 1 || changed[0] != "dns" {
		t.Fatalf("changed %q err %v", changed, err)
	}
	if sw.fwd != open.String() || inst.ForwardGen() != gen {
		t.Fatalf("a reload of DNS dropped the forwarded port: kill switch %s, gen %d -> %d", sw.fwd, gen, inst.ForwardGen())
	}
	// A longer lease asked for: the old port is closed with the reload.
	next = reloaded(func(s *config.Spec) { s.DNSSearch = []string{"example.org"}; s.PortForward.Lifetime = 2 * time.Minute })
	if changed, err := e.Reload(context.Background(), inst, next[0]); err != nil || len(changed) != 1 || changed[0] != "portForwarding" {
		t.Fatalf("changed %q err %v", changed, err)
	}
	if sw.fwd != "none" || !inst.Forwarded().IsZero() || inst.ForwardGen() == gen {
		t.Fatalf("after a port-forwarding reload: kill switch %s, instance %s, gen %d", sw.fwd, inst.Forwarded(), inst.ForwardGen())
	}
	if err := e.SetForwarded(inst, gen, open); err == nil || sw.fwd != "none" {
		t.Fatalf("a lease of the old forwarding was opened (err %v, kill switch %s)", err, sw.fwd)
	}
	if len(sw.violations) > 0 {
		t.Fatalf("violations: %v", sw.violations)
	}
}
