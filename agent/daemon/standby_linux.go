package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// The warm standby's part of the failover loop (issue 25): judge the
// standby from the check's reading of the device, replace a dead one,
// re-arm the server a warm switch left, and move back to the preferred
// server (health.preferFirst). A pool of one has none: today's behaviour.

// standbyTick judges and manages the standby on d, the check's reading
// of the device; true when it changed the device.
func (f *failover) standbyTick(ctx context.Context, now time.Time, d *wireguard.Device) bool {
	if len(f.pool) < 2 {
		f.standby = StandbySnapshot{State: liveness.StandbyNone, Why: "a pool of one server"}
		return false
	}
	if f.inst.Tunnel == nil || wireguard.Stopped(f.inst.Tunnel) {
		return false // the repair's: a new device has no standby
	}
	cur, armed := f.eng.Standby(f.inst)
	if !f.inst.Spec.Standby {
		// health.standby false: none, and a standby armed before a
		// reload turned it off goes.
		f.standby, f.lastDead = StandbySnapshot{State: liveness.StandbyNone, Why: StandbyOff}, -1
		if cur == nil {
			return false
		}
		if err := f.eng.SetStandby(ctx, f.inst, nil); err != nil {
			f.log.Warn("cannot remove the standby (health.standby is off)", "err", err)
		}
		return true
	}
	curIdx, st := -1, liveness.StandbyNone
	snap := StandbySnapshot{State: liveness.StandbyNone}
	if cur != nil {
		curIdx = cur.Server
		hs := lastHandshake(d, cur.Peers[0].PublicKey)
		st = liveness.JudgeStandby(now, armed, hs)
		if f.plan.Observe(now, curIdx, st) {
			f.log.Warn("the standby server does not answer; replacing it", "standby", curIdx, "config", cur.ConfigFile())
		}
		snap.Known, snap.State, snap.LastHandshake, snap.Server = true, st, hs, serverOf(cur)
		if !hs.IsZero() {
			snap.HandshakeAge, snap.HandshakeKnown = now.Sub(hs), true
		}
	}
	var why error
	usable := func(i int) bool {
		err := engine.StandbyCompatible(f.inst.Spec, f.pool[i])
		if err != nil && why == nil {
			why = fmt.Errorf("server %d cannot share the device: %w", i, err)
		}
		return err == nil
	}
	want, ok := f.plan.Candidate(now, f.inst.Spec.Server, curIdx, st, usable)
	changed := false
	switch {
	case !ok && cur != nil && st == liveness.StandbyDead:
		// No other server to try now: the dead one's peer goes (it
		// would keep handshaking for nothing) until a hold ends.
		if err := f.eng.SetStandby(ctx, f.inst, nil); err != nil {
			f.log.Warn("cannot remove the dead standby", "err", err)
		}
		changed = true
		f.lastDead = curIdx
		snap = f.deadSnapshot()
	case !ok && cur == nil && f.lastDead >= 0 && f.lastDead < len(f.pool) && f.lastDead != f.inst.Spec.Server:
		snap = f.deadSnapshot()
	case !ok && cur == nil:
		snap.Why = "every other server is held out after failing (tried again after its hold)"
		if why != nil {
			snap.Why = why.Error()
		}
	case ok && (want != curIdx || armed.IsZero()):
		// A new standby, or the server a warm switch left (its session
		// is the old one's: a fresh handshake is the evidence).
		changed = true
		if err := f.eng.SetStandby(ctx, f.inst, f.pool[want]); err != nil {
			if !errors.Is(err, engine.ErrDataPlaneStopped) {
				f.plan.Held(now, want)
			}
			f.log.Warn("cannot make the server the standby", "standby", want, "err", err)
			snap = StandbySnapshot{State: liveness.StandbyNone, Why: err.Error()}
			break
		}
		f.log.Info("standby server armed", "standby", want, "config", f.pool[want].ConfigFile())
		f.lastDead = -1
		snap = StandbySnapshot{Known: true, State: liveness.StandbyArming, Server: serverOf(f.pool[want])}
		f.plan.Observe(now, want, liveness.StandbyArming)
	}
	f.standby = snap
	return changed
}

// StandbyOff is the reason status gives for no standby when
// health.standby is false.
const StandbyOff = "off"

// deadSnapshot is the standby last found dead, its peer removed, held out
// until its hold ends.
func (f *failover) deadSnapshot() StandbySnapshot {
	return StandbySnapshot{Known: true, Server: serverOf(f.pool[f.lastDead]), State: liveness.StandbyDead,
		Why: "no handshake; its peer removed, tried again after its hold"}
}

func serverOf(s *config.Spec) engine.Server {
	out := engine.Server{Index: s.Server, ConfigFile: s.ConfigFile()}
	if len(s.Peers) > 0 {
		out.Endpoint = s.Peers[0].Endpoint
	}
	return out
}

func lastHandshake(d *wireguard.Device, k wgtypes.Key) time.Time {
	for _, p := range d.Peers {
		if p.PublicKey == k {
			return p.LastHandshakeTime
		}
	}
	return time.Time{}
}

// moveBack moves the namespace back to the preferred server when the plan
// says so (health.preferFirst: the first server a warm standby for the
// prefer wait) and the active server is healthy; true when it switched.
// It is a warm switch like any other: the kill switch replaced
// atomically, then the allowed IPs moved.
func (f *failover) moveBack(ctx context.Context, now time.Time) bool {
	if !f.standby.Known || f.standby.State != liveness.StandbyWarm {
		return false
	}
	if st, _ := f.rec.State(); st != liveness.Healthy {
		return false
	}
	if v, _ := f.judge.Verdict(now); v == liveness.Dead {
		return false
	}
	from, to := f.inst.Spec.Server, f.standby.Server.Index
	if !f.plan.MoveBack(now, from, to) {
		return false
	}
	if err := f.eng.Switch(ctx, f.inst, f.pool[to]); err != nil {
		f.log.Warn("cannot move back to the preferred server; staying", "server", from, "preferred", to, "err", err)
		f.plan.Held(now, to)
		return false
	}
	f.rec.MovedTo(to)
	f.plan.MovedBack(now)
	f.restart()
	if err := liveness.Nudge(f.inst.Spec); err != nil {
		f.log.Debug("cannot nudge the tunnel", "err", err)
	}
	f.log.Info("moved back to the preferred server", "server", to, "from", from, "config", f.inst.Spec.ConfigFile(), "waited", f.plan.PreferWait())
	f.publish()
	return true
}

// standbyRecord is the standby for the state file (nil: a pool of one).
func (f *failover) standbyRecord() *engine.StandbyRecord {
	if len(f.pool) < 2 {
		return nil
	}
	s := f.standby
	r := &engine.StandbyRecord{Index: -1, State: string(s.State), Why: s.Why}
	if r.State == "" {
		r.State = string(liveness.StandbyNone)
	}
	if s.Known {
		r.Index, r.ConfigFile, r.Endpoint = s.Server.Index, s.Server.ConfigFile, s.Server.Endpoint
	}
	return r
}

func sameStandby(a, b *engine.StandbyRecord) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}
