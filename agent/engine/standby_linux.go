package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// A warm standby (issue 25): the next server of the pool is a second peer
// on the tunnel's device with no allowed IPs, so nothing routes to it and
// nothing it sends is accepted as the namespace's traffic, and with a
// persistent keepalive, so WireGuard keeps a session with it. A switch to
// it moves the allowed IPs from the active peer to it in one
// configuration of the device (no peer replaced, no cold handshake),
// after the same atomic replace of the kill switch as any switch.
//
// One device has one private key and one set of addresses, so the
// standby must share them with the active server (Mullvad-style pools:
// one key, one address, every server). StandbyCompatible says when it
// does not; the daemon then keeps no standby and fails over as before
// (docs/architecture.md, "Warm standby").
//
// The kill switch does not change for a standby: in host mode the
// device's UDP socket is in the host namespace (the namespace's kill
// switch never sees WireGuard), and in sidecar mode the kill switch
// already admits the agent's WireGuard to every endpoint of the pool.

// StandbyKeepalive is the standby peer's persistent keepalive: often
// enough that a session is renewed (at REKEY_AFTER_TIME, 120 s, on the
// next send) before it could expire (REJECT_AFTER_TIME, 180 s).
const StandbyKeepalive = liveness.StandbyKeepalive

type standby struct {
	spec *config.Spec
	peer wgtypes.PeerConfig // as on the device: no allowed IPs, StandbyKeepalive
	// armed is when the peer was added afresh (no session: its first
	// keepalive starts a handshake); zero for the server a warm switch
	// just left, whose session is the old one's.
	armed time.Time
}

type wantKey struct {
	applied *wgtypes.Config
	standby *standby
}

// StandbyCompatible says why s cannot be a standby peer on the device
// that carries active (nil: it can).
func StandbyCompatible(active, s *config.Spec) error {
	switch {
	case s == nil || active == nil:
		return errors.New("no server")
	case s.Server == active.Server:
		return errors.New("it is the active server")
	case len(active.Peers) != 1 || len(s.Peers) != 1:
		return errors.New("a server with more than one peer cannot be a standby peer")
	case s.PrivateKey != active.PrivateKey:
		return errors.New("its private key differs from the active server's (a device has one key)")
	case !slices.Equal(s.Addresses, active.Addresses):
		return errors.New("its tunnel addresses differ from the active server's (a device has one set)")
	case s.MTU != active.MTU || s.ListenPort != active.ListenPort || s.FwMark != active.FwMark:
		return errors.New("its MTU, listen port or fwmark differs from the active server's")
	case s.Peers[0].PublicKey == active.Peers[0].PublicKey:
		return errors.New("its server key is the active server's (a device has one peer per key)")
	case active.PinEndpoints || s.PinEndpoints:
		return errors.New("wireguard.pinEndpoints lets the tunnel reach the active server's endpoints only")
	}
	return nil
}

// Standby is the standby server on the device and when its peer was
// added afresh (zero: not since a warm switch made it the standby); nil
// when there is none.
func (inst *Instance) Standby() (*config.Spec, time.Time) {
	if inst.standby == nil {
		return nil, time.Time{}
	}
	return inst.standby.spec, inst.standby.armed
}

// Standby is inst.Standby, for the daemon's failover loop (an interface
// its tests fake).
func (e *Engine) Standby(inst *Instance) (*config.Spec, time.Time) { return inst.Standby() }

// StandbyServer describes the standby for status and metrics (ok false:
// none).
func (inst *Instance) StandbyServer() (Server, bool) {
	if inst.standby == nil {
		return Server{}, false
	}
	s := inst.standby.spec
	out := Server{Index: s.Server, ConfigFile: s.ConfigFile(), Endpoint: endpointOf(s)}
	if ep := inst.standby.peer.Endpoint; ep != nil {
		out.Resolved = ep.String()
	}
	return out, true
}

// SetStandby makes s (a server of the pool that StandbyCompatible
// accepts) the standby: the previous standby's peer is removed and s's
// added afresh, its endpoint resolved now, with no allowed IPs and
// StandbyKeepalive, so it handshakes at once. The same s again re-arms
// it (a fresh handshake is the evidence that it answers). nil removes
// the standby. Neither the active peer nor the kill switch is touched.
func (e *Engine) SetStandby(ctx context.Context, inst *Instance, s *config.Spec) error {
	if inst.Tunnel == nil || wireguard.Stopped(inst.Tunnel) {
		return fmt.Errorf("standby: %w", ErrDataPlaneStopped)
	}
	sys := e.sys()
	// The active server's configuration is known before a standby joins
	// it (the drift check's reference, and a warm switch's).
	if _, err := e.applied(ctx, inst); err != nil {
		return fmt.Errorf("standby: %w", err)
	}
	var peer wgtypes.PeerConfig
	if s != nil {
		if err := StandbyCompatible(inst.Spec, s); err != nil {
			return fmt.Errorf("standby server %d: %w", s.Server, err)
		}
		cfg, err := sys.dev.Config(ctx, s)
		if err != nil {
			return fmt.Errorf("standby server %d: %w", s.Server, err)
		}
		if len(cfg.Peers) != 1 {
			return fmt.Errorf("standby server %d: %d peers", s.Server, len(cfg.Peers))
		}
		peer = standbyPeer(cfg.Peers[0])
	}
	if old := inst.standby; old != nil {
		rm := wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: old.peer.PublicKey, Remove: true}}}
		if err := sys.dev.Configure(inst.Tunnel, inst.Spec.Name, rm); err != nil {
			return fmt.Errorf("standby: remove server %d's peer: %w", old.spec.Server, err)
		}
		inst.standby = nil
	}
	if s == nil {
		return nil
	}
	if err := sys.dev.Configure(inst.Tunnel, inst.Spec.Name, wgtypes.Config{Peers: []wgtypes.PeerConfig{peer}}); err != nil {
		return fmt.Errorf("standby server %d: %w", s.Server, err)
	}
	inst.standby = &standby{spec: s, peer: peer, armed: time.Now()}
	return nil
}

// standbyPeer is p as a standby: no allowed IPs (replacing any it had),
// StandbyKeepalive.
func standbyPeer(p wgtypes.PeerConfig) wgtypes.PeerConfig {
	ka := StandbyKeepalive
	p.AllowedIPs, p.ReplaceAllowedIPs, p.PersistentKeepaliveInterval, p.UpdateOnly, p.Remove = nil, true, &ka, false, false
	return p
}

// warmMove is the device change of a warm switch from the active peer
// (cur, as applied) to the standby's: the standby's peer takes its
// allowed IPs and keepalive (in that order: each prefix moves from one
// peer to the other in the device's routing table, never routed to
// neither), and the active peer is left with none, a standby. No peer is
// added or removed.
func warmMove(cur, next wgtypes.PeerConfig) wgtypes.Config {
	next.UpdateOnly, next.ReplaceAllowedIPs, next.Remove = true, true, false
	next.PresharedKey, next.Endpoint = nil, nil // as on the device
	left := standbyPeer(cur)
	left.UpdateOnly, left.PresharedKey, left.Endpoint = true, nil, nil
	return wgtypes.Config{Peers: []wgtypes.PeerConfig{next, left}}
}

// wantConfig is the device configuration the drift check compares with:
// the active server's as applied, plus the standby's peer.
func (inst *Instance) wantConfig(applied *wgtypes.Config) *wgtypes.Config {
	if inst.standby == nil {
		return applied
	}
	c := *applied
	c.Peers = append(slices.Clip(c.Peers), inst.standby.peer)
	return &c
}
