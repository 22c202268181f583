package harness

import (
	"net/netip"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
)

// HostWatch is what the host sees of a confined namespace ns while a test
// breaks it and probes: captures of the host's uplink, its LAN link and
// the namespace's host link, and the decoys' log.
type HostWatch struct {
	tp             *Topo
	ns             string
	up, lan, veth  *observe.Observer
	mark           int
	decoyCtl       []byte
	decoysBaseline bool
}

// WatchHost starts the three captures.
func (tp *Topo) WatchHost(t *testing.T, ns string) *HostWatch {
	t.Helper()
	return &HostWatch{tp: tp, ns: ns,
		up:   observe.Start(t, tp.Host, testbed.HostUplinkIf, nil),
		lan:  observe.Start(t, tp.Host, testbed.HostLANIf, nil),
		veth: observe.Start(t, tp.Host, names.HostVeth(ns), nil),
	}
}

// MarkDecoys runs the decoy log's positive control (DecoyControl): the
// decoy hits from here on are the ones Stop reports.
func (w *HostWatch) MarkDecoys(t *testing.T) {
	t.Helper()
	w.mark, w.decoyCtl = w.tp.DecoyControl(t)
	w.decoysBaseline = true
}

// Crossed is what got past the kill switch while a HostWatch ran.
type Crossed struct {
	Up, LAN, Veth []observe.Packet // beyond link noise, the positive controls and allowed WireGuard
	Decoys        []provider.Event // hits in the decoys' log
	hostIf        string
}

// Stop sends each capture's positive control, stops the captures and
// returns what crossed: on the uplink anything but WireGuard and wgAllowed
// (the ICMP bounces the state allows), on the LAN link and the host link
// anything at all.
func (w *HostWatch) Stop(t *testing.T, wgAllowed observe.Match) Crossed {
	t.Helper()
	if !w.decoysBaseline {
		t.Fatal("HostWatch.Stop before MarkDecoys")
	}
	ctlUp := Control(t, w.up, w.tp.Host, AP(testbed.DecoyTarget4, testbed.ControlPort))
	ctlLAN := Control(t, w.lan, w.tp.Host, AP(testbed.LANHost4, testbed.ControlPort))
	ctlVeth := Control(t, w.veth, w.tp.Host, netip.AddrPortFrom(testbed.HostLinkNS.Addr(), testbed.ControlPort))
	return Crossed{
		Up:     Unexpected(w.up.Stop(), observe.LinkNoise, WGTraffic, wgAllowed, observe.Payload(ctlUp), observe.Payload(w.decoyCtl)),
		LAN:    Unexpected(w.lan.Stop(), observe.LinkNoise, observe.Payload(ctlLAN), observe.Payload(w.decoyCtl)),
		Veth:   Unexpected(w.veth.Stop(), observe.LinkNoise, observe.Payload(ctlVeth)),
		Decoys: Hits(t, w.tp.Decoy, w.mark),
		hostIf: names.HostVeth(w.ns),
	}
}

// Report fails t for every leak in x and returns how many there were. With
// vethContained, packets on the host link are only logged: the state lets
// the namespace send there (its own table is gone) and the host's table
// keeps them there.
func (x Crossed) Report(t *testing.T, vethContained bool) (leaks int) {
	t.Helper()
	if len(x.Up) > 0 {
		t.Errorf("LEAK on the host uplink:\n%s", observe.Dump(x.Up))
	}
	if len(x.LAN) > 0 {
		t.Errorf("LEAK on the host's LAN link:\n%s", observe.Dump(x.LAN))
	}
	veth := len(x.Veth)
	if vethContained {
		t.Logf("without its kill switch the namespace sent %d packets onto the host link; the host-side table kept them there", veth)
		veth = 0
	} else if veth > 0 {
		t.Errorf("the confined namespace sent on the host link (%s):\n%s", x.hostIf, observe.Dump(x.Veth))
	}
	if len(x.Decoys) > 0 {
		t.Errorf("LEAK: the decoys saw:\n%s", DumpEvents(x.Decoys))
	}
	return len(x.Up) + len(x.LAN) + veth + len(x.Decoys)
}
