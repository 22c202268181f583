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
	p := pool()
	for _, s := range p {
		s.PortForward = &config.PortForwardSpec{Gateway: s.DNS[0], Style: config.PortForwardProton, Protocols: []string{"tcp", "udp"}, Lifetime: time.Minute}
	}
	sw, e, inst, _ := upSwitchFakeWith(t, p)
	open := policy.Forwarded{TCP: []uint16{40001}, UDP: []uint16{40001}}
	if err := e.SetForwarded(inst, inst.ForwardGen(), open); err != nil {
		t.Fatal(err)
	}
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
