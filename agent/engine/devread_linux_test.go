package engine

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// selfReadingTunnel is a fake tunnel that reads its own device, as the
// userspace backend's does, and counts the reads.
type selfReadingTunnel struct {
	*fakeTunnel
	sw    *switchWorld
	reads int
}

func (t *selfReadingTunnel) Device() (*wireguard.Device, error) {
	t.reads++
	return fakeDevices{t.sw}.Read("", "")
}

// The engine reads a tunnel that can read itself through it, never
// through wgctrl (sys.dev.Read); any other tunnel through sys.dev.
func TestDeviceReadsTheTunnelItself(t *testing.T) {
	sw, e, inst, _ := upSwitchFake(t)
	// The positive control: a tunnel that cannot read itself goes
	// through sys.dev, whose fake reports the device it holds.
	if d, err := e.Device(inst); err != nil || len(d.Peers) != 1 {
		t.Fatalf("through sys.dev: %+v, %v", d, err)
	}
	self := &selfReadingTunnel{fakeTunnel: inst.Tunnel.(*fakeTunnel), sw: sw}
	inst.Tunnel = self
	e.system.dev = noRead{fakeDevices{sw}, t}
	if _, err := e.Device(inst); err != nil || self.reads != 1 {
		t.Fatalf("Device: %v, %d reads of the tunnel", err, self.reads)
	}
	if d, err := e.Device(inst); err != nil || len(d.Peers) != 1 || self.reads != 2 {
		t.Fatalf("Device again: %+v %v, %d reads of the tunnel", d, err, self.reads)
	}
}

// noRead fails the test if the engine reads the device through wgctrl.
type noRead struct {
	fakeDevices
	t *testing.T
}

func (n noRead) Read(string, string) (*wireguard.Device, error) {
	n.t.Fatal("read the device through sys.dev, not the tunnel")
	return nil, nil
}

// RepairDrift judges the device it is given and reads nothing itself;
// its reference (the applied key's public half) is made once per
// configuration, and again after a switch applied another one.
func TestRepairDriftJudgesTheReading(t *testing.T) {
	sw, e, inst, p := upSwitchFake(t)
	self := &selfReadingTunnel{fakeTunnel: inst.Tunnel.(*fakeTunnel), sw: sw}
	inst.Tunnel = self
	e.system.dev = noRead{fakeDevices{sw}, t}
	d, _ := fakeDevices{sw}.Read("", "")
	if drift, err := e.RepairDrift(context.Background(), inst, d); err != nil || len(drift) != 0 {
		t.Fatalf("no drift expected: %v %v", drift, err)
	}
	want := inst.want
	if want == nil || want.Config() != inst.applied {
		t.Fatal("no reference made from the applied configuration")
	}
	if _, err := e.RepairDrift(context.Background(), inst, d); err != nil || inst.want != want {
		t.Fatalf("the reference was made again for the same configuration (%v)", err)
	}
	// Someone moves the endpoint: the given reading says so.
	moved := *d
	moved.Peers = []wgtypes.Peer{d.Peers[0]}
	moved.Peers[0].Endpoint = &net.UDPAddr{IP: net.IPv4(192, 0, 2, 66), Port: 1}
	drift, err := e.RepairDrift(context.Background(), inst, &moved)
	if err != nil || len(drift) != 1 || !strings.Contains(drift[0], "192.0.2.66:1") || !slicesHasPrefix(sw.calls, "dev.configure") {
		t.Fatalf("drift %v %v, calls %v", drift, err, sw.calls)
	}
	if self.reads != 0 {
		t.Fatalf("RepairDrift read the device %d times", self.reads)
	}
	// After a switch to the other server (another key), the reference
	// is the new configuration's.
	if err := e.Switch(context.Background(), inst, p[1]); err != nil {
		t.Fatal(err)
	}
	d, _ = fakeDevices{sw}.Read("", "")
	if drift, err := e.RepairDrift(context.Background(), inst, d); err != nil || len(drift) != 0 {
		t.Fatalf("after the switch: %v %v", drift, err)
	}
	if inst.want == want || inst.want.Config() != inst.applied {
		t.Fatal("the reference is still the previous server's")
	}
	// The old server's device drifts from the new reference (the key).
	old := &wireguard.Device{PublicKey: p[0].PrivateKey.PublicKey(), Peers: d.Peers}
	if drift, _ := e.RepairDrift(context.Background(), inst, old); !strings.Contains(strings.Join(drift, "; "), "private key was changed") {
		t.Fatalf("the previous server's key passed the new reference: %v", drift)
	}
}
