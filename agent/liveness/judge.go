// Package liveness decides whether a tunnel is alive, idle or dead, from
// WireGuard's own timers and counters and an optional probe, and drives
// the recovery: retry the same server, fail over to the next of the pool,
// round-robin, with a bounded backoff once every server has failed. It
// reads nothing itself and changes nothing itself: the daemon feeds it
// samples and carries out its actions, so that every decision is tested
// with a fake clock.
package liveness

import (
	"fmt"
	"time"
)

// WireGuard's protocol constants (the whitepaper, section 6.1; the same
// in the kernel and in wireguard-go).
const (
	RekeyTimeout     = 5 * time.Second   // a handshake initiation unanswered this long is retried
	KeepaliveTimeout = 10 * time.Second  // a peer that received data answers within this, if only with a keepalive
	RekeyAfterTime   = 120 * time.Second // a session this old is renewed on the next send
	RejectAfterTime  = 180 * time.Second // a session this old cannot carry data
	rekeyJitter      = 334 * time.Millisecond
)

// KeepaliveBytes is what one keepalive adds to the transmit counter (an
// empty transport message: 16-byte header, 16-byte tag).
const KeepaliveBytes = 32

// DefaultSilence is how long the namespace may send without receiving
// anything before the tunnel is dead: a live peer answers data within
// KEEPALIVE_TIMEOUT (a passive keepalive at worst), and when it does not,
// WireGuard starts a new handshake that gets REKEY_TIMEOUT (plus jitter)
// to complete.
const DefaultSilence = KeepaliveTimeout + RekeyTimeout + rekeyJitter

// Sample is one reading of the tunnel's peer (the active server's).
type Sample struct {
	At            time.Time
	LastHandshake time.Time // zero: never
	Tx, Rx        int64     // bytes sent to and received from the peer
	// Readable is false when the device could not be read (no verdict
	// from the counters then).
	Readable bool
}

// Verdict is the judge's opinion of the tunnel.
type Verdict int

const (
	// Unknown: no evidence yet (just reset, or nothing read).
	Unknown Verdict = iota
	// Alive: the peer answered (received bytes grew, a handshake
	// completed) or the probe succeeded.
	Alive
	// Idle: nothing was sent; an idle tunnel is not dead.
	Idle
	// Dead: see Cause.
	Dead
)

func (v Verdict) String() string {
	switch v {
	case Alive:
		return "alive"
	case Idle:
		return "idle"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// Judge turns samples and probe results into a verdict. It keeps the
// history it needs (when the namespace started sending without an
// answer, probe failures in a row). Not safe for concurrent use.
type Judge struct {
	// Silence: sending without receiving for this long is dead (default
	// DefaultSilence).
	Silence time.Duration
	// Failures: probe failures in a row that make the tunnel dead (0: the
	// probe is off).
	Failures int

	have      bool
	last      Sample
	since     time.Time // the namespace has sent without an answer since then (zero: not)
	sinceHS   time.Time // LastHandshake when since was set
	probeFail int
	probeOK   bool
	lastProbe string
	answered  bool      // rx grew, a handshake completed or the probe succeeded since the reset
	active    time.Time // the last sample at which a counter grew
}

// Reset forgets everything: the peer changed (a switch or a retry
// replaced it, and its counters start at zero).
func (j *Judge) Reset() {
	s, f := j.Silence, j.Failures
	*j = Judge{Silence: s, Failures: f}
}

// SetProbe takes a new probe (failures 0: none): the old probe's results
// are forgotten, what the peer's counters showed is kept.
func (j *Judge) SetProbe(failures int) {
	j.Failures, j.probeFail, j.probeOK, j.lastProbe = failures, 0, false, ""
}

func (j *Judge) silence() time.Duration {
	if j.Silence > 0 {
		return j.Silence
	}
	return DefaultSilence
}

// Observe takes one sample of the peer.
func (j *Judge) Observe(s Sample) {
	if !s.Readable {
		return
	}
	if !j.have {
		j.have, j.last = true, s
		if s.Tx > 0 || s.Rx > 0 {
			j.active = s.At
		}
		if s.Rx > 0 {
			// The counters start at zero with the peer (created by Up or
			// replaced since the Reset): it has answered since.
			j.answered = true
			return
		}
		if s.Tx > 0 && s.Rx == 0 && s.LastHandshake.IsZero() {
			// A peer that has sent (its handshake initiation: without a
			// session WireGuard queues the data and counts only that)
			// and received nothing, ever. After a Reset the counters
			// started at zero, so the sending began since.
			j.since = s.At
		}
		return
	}
	prev := j.last
	j.last = s
	rxGrew := s.Rx > prev.Rx
	hsNew := s.LastHandshake.After(prev.LastHandshake)
	// A keepalive (passive, after received data, or persistent) is sent
	// and never answered: growth by one keepalive is not sending.
	sent := s.Tx-prev.Tx > KeepaliveBytes
	if rxGrew || sent {
		j.active = s.At
	}
	if rxGrew || hsNew {
		j.answered = true
		j.since = time.Time{}
		return
	}
	if sent && j.since.IsZero() {
		// Sending started (or resumed) with nothing coming back: the
		// clock starts at the previous sample, the last moment tx had
		// not grown.
		j.since, j.sinceHS = prev.At, prev.LastHandshake
	}
}

// Probe records one probe result; detail describes a failure.
func (j *Judge) Probe(ok bool, detail string) {
	if ok {
		j.probeFail, j.probeOK, j.answered = 0, true, true
		return
	}
	j.probeFail++
	j.probeOK = false
	j.lastProbe = detail
}

// Verdict is the judge's opinion at now, with the cause of a dead one
// (names the evidence; never a key).
func (j *Judge) Verdict(now time.Time) (Verdict, string) {
	if j.Failures > 0 && j.probeFail >= j.Failures {
		return Dead, fmt.Sprintf("probe failed %d times in a row (%s)", j.probeFail, j.lastProbe)
	}
	if !j.since.IsZero() {
		waited := now.Sub(j.since)
		hs := j.sinceHS
		switch {
		case hs.IsZero() && waited >= RekeyTimeout+rekeyJitter:
			// No session: the first packet started a handshake, which
			// had REKEY_TIMEOUT to complete.
			return Dead, fmt.Sprintf("sending for %s, no handshake ever completed (REKEY_TIMEOUT %s)", round(waited), RekeyTimeout)
		case !hs.IsZero() && now.Sub(hs) >= RejectAfterTime && waited >= RekeyTimeout+rekeyJitter:
			// The session is too old to carry data and no new handshake
			// completed in REKEY_TIMEOUT.
			return Dead, fmt.Sprintf("sending for %s, last handshake %s ago (older than REJECT_AFTER_TIME %s)", round(waited), round(now.Sub(hs)), RejectAfterTime)
		case waited >= j.silence():
			return Dead, fmt.Sprintf("sending for %s without an answer, last handshake %s ago", round(waited), round(now.Sub(hs)))
		}
	}
	if !j.since.IsZero() {
		// Sending, waiting for an answer (not for long yet): alive if
		// the peer answered before.
		if j.answered || j.probeOK {
			return Alive, ""
		}
		return Unknown, ""
	}
	if j.have && (j.active.IsZero() || now.Sub(j.active) >= KeepaliveTimeout) && !j.probeOK {
		// Nothing sent or received for a while: idle, which is not dead.
		return Idle, ""
	}
	if j.answered || j.probeOK {
		return Alive, ""
	}
	if !j.have {
		return Unknown, ""
	}
	return Idle, ""
}

// Answered says the peer has answered since the last Reset (received
// bytes grew, a handshake completed, the probe succeeded): the server
// works, even if the tunnel idles now.
func (j *Judge) Answered() bool { return j.answered || j.probeOK }

// HandshakeAge is the age of the last handshake at now (ok false: never
// or nothing read).
func (j *Judge) HandshakeAge(now time.Time) (time.Duration, bool) {
	if !j.have || j.last.LastHandshake.IsZero() {
		return 0, false
	}
	return now.Sub(j.last.LastHandshake), true
}

// SendingSince is when the device started sending without receiving
// anything (the sample before the first that showed it: the last moment
// it had not sent yet), zero when it is not: it received since, or sends
// nothing, or only keepalives.
func (j *Judge) SendingSince() time.Time { return j.since }

// ProbeFailures is the number of probe failures in a row.
func (j *Judge) ProbeFailures() int { return j.probeFail }

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
