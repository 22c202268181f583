package liveness

import (
	"fmt"
	"time"
)

// State is where the recovery stands.
type State string

const (
	// Healthy: the active server answers (or nothing says otherwise).
	// Running on a fallback server is healthy too.
	Healthy State = "healthy"
	// Retrying: the active server looked dead; it was re-applied (its
	// endpoint re-resolved, a fresh handshake) once.
	Retrying State = "retrying"
	// FailingOver: the agent moved to the next server and waits for it
	// to answer.
	FailingOver State = "failing over"
	// AllDead: every server of the pool failed since the last healthy
	// one; the namespace stays closed and the agent keeps trying, with a
	// backoff between attempts.
	AllDead State = "every server dead"
)

// Backoff bounds: after every server failed, attempts are spaced from
// MinBackoff, doubling, up to MaxBackoff.
const (
	MinBackoff = time.Second
	MaxBackoff = 60 * time.Second
)

// Action is what the recovery asks the daemon to do: apply server
// Server of the pool (re-resolving its endpoint; Retry says it is the
// same server again).
type Action struct {
	Server int
	Retry  bool
}

// Switcher carries out an action: it makes server i the active one (the
// kill switch replaced atomically by that server's, never removed). An
// error leaves the previous server active.
type Switcher interface {
	Switch(server int, retry bool) error
}

// Recovery is the state machine. Pool is the number of servers; Active
// the one in use. Not safe for concurrent use; the daemon's loop owns it.
type Recovery struct {
	Pool   int
	Active int
	// MinBackoff, MaxBackoff: zero means the package defaults.
	MinBackoff, MaxBackoff time.Duration
	// Standby is the warm standby's server when StandbyWarm (the daemon
	// sets both before each Dead): with one, a dead server is left at
	// once for it, without a retry of the same server.
	Standby     int
	StandbyWarm bool

	state    State
	cause    string
	failed   int // servers found dead since the last healthy one
	tried    int // the server of the last attempt
	backoff  time.Duration
	notUntil time.Time // no attempt before this (backoff)

	// Counters for metrics.
	Failovers int // switches to another server that succeeded
	Attempts  int // actions carried out (retries and switches)
}

// State is the recovery's state and, unless healthy, why.
func (r *Recovery) State() (State, string) {
	if r.state == "" {
		return Healthy, ""
	}
	return r.state, r.cause
}

func (r *Recovery) minB() time.Duration {
	if r.MinBackoff > 0 {
		return r.MinBackoff
	}
	return MinBackoff
}

func (r *Recovery) maxB() time.Duration {
	if r.MaxBackoff > 0 {
		return r.MaxBackoff
	}
	return MaxBackoff
}

// Alive: the active server answers. Everything resets.
func (r *Recovery) Alive() {
	r.state, r.cause, r.failed, r.backoff, r.notUntil = Healthy, "", 0, 0, time.Time{}
}

// Dead: the active server is dead at now for cause. It returns the action
// to take, if any (none while backing off). The caller carries it out
// with Apply.
func (r *Recovery) Dead(now time.Time, cause string) (Action, bool) {
	if now.Before(r.notUntil) {
		return Action{}, false
	}
	r.cause = cause
	if r.StandbyWarm && r.Standby != r.Active && r.Standby >= 0 && r.Standby < r.Pool {
		// A warm standby: switch now; the dead server is re-checked in
		// the background (as a standby once its hold ends).
		return Action{Server: r.Standby}, true
	}
	if st, _ := r.State(); st == Healthy {
		// A server that was working gets one more chance (a fresh
		// handshake, its endpoint re-resolved); one just switched to
		// does not (the switch was its fresh start).
		r.tried = r.Active
		return Action{Server: r.Active, Retry: true}, true
	}
	// Round-robin from the last attempt (a switch that failed does not
	// make the next attempt the same server).
	return Action{Server: (r.tried + 1) % max(r.Pool, 1)}, true
}

// Apply carries out a, returned by Dead, with sw, and moves the state
// machine on. The active server changes only when the switch succeeded.
func (r *Recovery) Apply(now time.Time, a Action, sw Switcher) error {
	r.Attempts++
	r.tried = a.Server
	if a.Retry {
		r.state = Retrying
	} else {
		// The active server is given up on.
		r.failed++
		r.state = FailingOver
	}
	err := sw.Switch(a.Server, a.Retry)
	if err == nil && !a.Retry && a.Server != r.Active {
		r.Active = a.Server
		r.Failovers++
	}
	if err != nil {
		r.cause = fmt.Sprintf("%s; switching to server %d failed: %v", r.cause, a.Server, err)
	}
	if r.failed >= max(r.Pool, 1) {
		// Every server has failed since the last healthy one: keep
		// trying, but no faster than the backoff.
		r.state = AllDead
		if r.backoff == 0 {
			r.backoff = r.minB()
		} else {
			r.backoff = min(2*r.backoff, r.maxB())
		}
		r.notUntil = now.Add(r.backoff)
	}
	return err
}

// MovedTo records a planned switch to server i that succeeded (a move
// back to the preferred server): not a failure, nothing is reset.
func (r *Recovery) MovedTo(i int) { r.Active, r.tried = i, i }

// Backoff is the current wait between attempts once every server failed
// (zero otherwise), and the time of the next attempt.
func (r *Recovery) Backoff() (time.Duration, time.Time) { return r.backoff, r.notUntil }
