package liveness

import "time"

// PassiveAfter is how long the namespace sends without receiving anything
// before a probe starts early: one check of the device (the agent reads
// its counters once a second) less a margin for the ticker's jitter. A
// live server answers data within a round trip; WireGuard's own rule
// (DefaultSilence) waits 15 s, and the probe's tick up to an interval.
const PassiveAfter = 900 * time.Millisecond

// PassiveTrigger decides when a probe starts before its tick: when the
// device has sent data and received nothing for PassiveAfter (the judge's
// SendingSince), which is what traffic into a dead server looks like.
// The probe then judges the server as it would on its tick (its timeout,
// its failures): the trigger only removes the wait for the tick, up to an
// interval.
//
// Its cost is bounded. Traffic that gets no answer while the server works
// also fires it: one-way traffic (a UDP stream whose receiver sends
// nothing back; WireGuard's passive keepalive answers it only every
// 10 s), or a request whose answer arrives just after a check. So it
// fires at most once per silence (until something is received again) and
// at most once per probe interval: one extra probe per interval at most,
// only while the namespace sends without an answer, never a probe a
// second. An idle tunnel (nothing sent) never fires it.
//
// Not safe for concurrent use; the zero value is ready.
type PassiveTrigger struct {
	last    time.Time // the last early probe
	episode time.Time // the silence it was for (SendingSince then)
}

// Fire says whether to probe now, at now, given since (the judge's
// SendingSince: zero when the device is not sending unanswered) and the
// probe's interval; true records the early probe.
func (t *PassiveTrigger) Fire(now, since time.Time, interval time.Duration) bool {
	if since.IsZero() || now.Sub(since) < PassiveAfter || since.Equal(t.episode) {
		return false
	}
	if !t.last.IsZero() && now.Sub(t.last) < interval {
		return false
	}
	t.last, t.episode = now, since
	return true
}
