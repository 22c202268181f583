package liveness

import (
	"time"
)

// StandbyState is the warm standby's state (issue 25).
type StandbyState string

const (
	// StandbyNone: no standby (a pool of one, no server the device can
	// carry next to the active one, or every other server held out).
	StandbyNone StandbyState = "none"
	// StandbyArming: its peer was added afresh; its handshake is awaited.
	StandbyArming StandbyState = "arming"
	// StandbyWarm: it handshook since it was armed and its session is
	// young enough to carry data: a switch to it sends at once.
	StandbyWarm StandbyState = "warm"
	// StandbyDead: no handshake within StandbyGrace of arming, or its
	// session grew older than StandbyMaxAge (its keepalives renew it
	// every REKEY_AFTER_TIME when it answers).
	StandbyDead StandbyState = "dead"
)

// Standby timing. A standby peer has a 25 s persistent keepalive: its
// first one starts a handshake at once, retried every REKEY_TIMEOUT.
const (
	// StandbyGrace is how long a standby added afresh has to complete a
	// handshake: three REKEY_TIMEOUTs (the first initiation and two
	// retries).
	StandbyGrace = 3 * RekeyTimeout
	// StandbyKeepalive is the standby peer's persistent keepalive: a
	// keepalive sent on a session older than REKEY_AFTER_TIME starts a
	// new handshake, so a live standby's session is renewed every 120 s
	// plus at most one keepalive interval.
	StandbyKeepalive = 25 * time.Second
	// StandbyMaxAge: a live standby's handshake is never older than
	// REKEY_AFTER_TIME + one keepalive interval + one REKEY_TIMEOUT (150
	// s); older, its renewal went unanswered. (A server that dies with a
	// young session is found at its renewal: WireGuard answers
	// keepalives with nothing, so nothing else tells.)
	StandbyMaxAge = RekeyAfterTime + StandbyKeepalive + RekeyTimeout
	// StandbyHoldMin, StandbyHoldMax: a server found dead as a standby
	// is not armed again for StandbyHoldMin, doubling each time it is
	// found dead again, up to StandbyHoldMax; one warm standby resets it.
	StandbyHoldMin = 30 * time.Second
	StandbyHoldMax = 10 * time.Minute
	// PreferAfter is how long the preferred (first) server must have
	// been a warm standby, without a break, before the namespace moves
	// back to it (health.preferFirst). A move back that fails within
	// FlapWindow (the preferred server judged dead again) doubles it, up
	// to PreferAfterMax; a move back that holds for FlapWindow resets it.
	PreferAfter    = 60 * time.Second
	PreferAfterMax = 30 * time.Minute
	FlapWindow     = 5 * time.Minute
)

// JudgeStandby is the standby's state at now from its peer's last
// handshake hs (zero: never) and when the peer was armed (added afresh;
// zero: not since it was the active server, whose session says nothing
// new about it).
func JudgeStandby(now, armed, hs time.Time) StandbyState {
	if armed.IsZero() {
		return StandbyArming
	}
	// A handshake since the arming (a second of slack between the
	// agent's clock reading and the device's).
	fresh := !hs.IsZero() && !hs.Before(armed.Add(-time.Second))
	switch {
	case fresh && now.Sub(hs) < StandbyMaxAge:
		return StandbyWarm
	case fresh:
		return StandbyDead
	case now.Sub(armed) >= StandbyGrace:
		return StandbyDead
	}
	return StandbyArming
}

// StandbyPlan chooses the standby and when to move back to the preferred
// server. Pool is the number of servers; PreferFirst moves back to server
// 0 once it has been a warm standby for the current prefer wait. Not safe
// for concurrent use; the daemon's loop owns it.
type StandbyPlan struct {
	Pool        int
	PreferFirst bool

	hold       map[int]time.Time     // no arming before then
	holdFor    map[int]time.Duration // the next hold
	warmSince  time.Time             // the current standby warm without a break since (zero: not warm)
	warmServer int
	preferWait time.Duration
	movedBack  time.Time // the last move back (zero: none)
	MovesBack  int       // moves back to the preferred server (metrics)
}

// Order is the order in which servers are considered for the standby
// while active is the active server: from the first with PreferFirst
// (so the preferred server is re-checked whenever its hold ends),
// otherwise the ones after active, round the pool.
func (p *StandbyPlan) Order(active int) []int {
	var out []int
	for k := range p.Pool {
		i := k
		if !p.PreferFirst {
			i = (active + 1 + k) % p.Pool
		}
		if i != active {
			out = append(out, i)
		}
	}
	return out
}

// Candidate is the server that should be the standby at now: the first
// of Order that usable accepts (the device can carry it next to the
// active server) and that is not held out. cur is the current standby
// (-1: none) and curState its state: a warm standby is kept unless a
// server before it in Order became available (its hold ended).
func (p *StandbyPlan) Candidate(now time.Time, active, cur int, curState StandbyState, usable func(int) bool) (int, bool) {
	for _, i := range p.Order(active) {
		if i == cur && curState != StandbyDead && !now.Before(p.hold[i]) {
			return i, true // the current one, or one after it: keep it
		}
		if !usable(i) || now.Before(p.hold[i]) {
			continue
		}
		return i, true
	}
	return -1, false
}

// Observe records the standby server i's state at now; it returns true
// when i was just found dead (held out from now on).
func (p *StandbyPlan) Observe(now time.Time, i int, st StandbyState) bool {
	if p.hold == nil {
		p.hold, p.holdFor = map[int]time.Time{}, map[int]time.Duration{}
	}
	switch st {
	case StandbyWarm:
		if p.warmSince.IsZero() || p.warmServer != i {
			p.warmSince, p.warmServer = now, i
		}
		delete(p.holdFor, i)
		return false
	case StandbyDead:
		p.Held(now, i)
		return true
	}
	p.warmSince = time.Time{}
	return false
}

// Held holds server i out of the standby from now (found dead, or it
// could not be armed).
func (p *StandbyPlan) Held(now time.Time, i int) {
	if p.hold == nil {
		p.hold, p.holdFor = map[int]time.Time{}, map[int]time.Duration{}
	}
	d := p.holdFor[i]
	if d == 0 {
		d = StandbyHoldMin
	}
	p.hold[i], p.holdFor[i] = now.Add(d), min(2*d, StandbyHoldMax)
	if p.warmServer == i {
		p.warmSince = time.Time{}
	}
}

// WarmFor is how long server i has been a warm standby without a break
// at now (0: it is not).
func (p *StandbyPlan) WarmFor(now time.Time, i int) time.Duration {
	if p.warmSince.IsZero() || p.warmServer != i {
		return 0
	}
	return now.Sub(p.warmSince)
}

// PreferWait is the current wait before a move back.
func (p *StandbyPlan) PreferWait() time.Duration {
	if p.preferWait == 0 {
		return PreferAfter
	}
	return p.preferWait
}

// MoveBack says whether to move back to the preferred server at now:
// PreferFirst, a pool of more than one, the active server not the
// first, the first the standby and warm for PreferWait.
func (p *StandbyPlan) MoveBack(now time.Time, active, standby int) bool {
	return p.PreferFirst && p.Pool > 1 && active != 0 && standby == 0 && p.WarmFor(now, 0) >= p.PreferWait()
}

// MovedBack records a move back at now.
func (p *StandbyPlan) MovedBack(now time.Time) {
	p.movedBack = now
	p.MovesBack++
	p.warmSince = time.Time{}
}

// Left records that the namespace failed over away from server from at
// now: a preferred server that failed within FlapWindow of a move back
// doubles the wait before the next one; one that held resets it.
func (p *StandbyPlan) Left(now time.Time, from int) {
	if from != 0 || p.movedBack.IsZero() {
		return
	}
	if now.Sub(p.movedBack) < FlapWindow {
		p.preferWait = min(2*p.PreferWait(), PreferAfterMax)
	} else {
		p.preferWait = 0
	}
	p.movedBack = time.Time{}
}
