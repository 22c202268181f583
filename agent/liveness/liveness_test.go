package liveness

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// feed observes a sample per second from t0+from to t0+to (inclusive),
// with tx and rx given as functions of the second.
func feed(j *Judge, from, to int, hs time.Time, tx, rx func(int) int64) {
	for s := from; s <= to; s++ {
		j.Observe(Sample{At: t0.Add(time.Duration(s) * time.Second), LastHandshake: hs, Tx: tx(s), Rx: rx(s), Readable: true})
	}
}

func flat(v int64) func(int) int64 { return func(int) int64 { return v } }
func growing(base int64) func(int) int64 {
	return func(s int) int64 { return base + int64(s)*100 }
}

// wantVerdict fails t unless j's verdict at t0+s is want, with a cause
// naming cause (when not empty); what says what the samples were.
func wantVerdict(t *testing.T, j *Judge, s float64, want Verdict, cause, what string) {
	t.Helper()
	if v, c := j.Verdict(at(s)); v != want || !strings.Contains(c, cause) {
		t.Fatalf("%s: verdict %v (%q), want %v %s", what, v, c, want, cause)
	}
}

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestIdleIsNotDead(t *testing.T) {
	// A handshake long ago, nothing sent or received for ten minutes.
	j := &Judge{}
	hs := t0.Add(-time.Hour)
	feed(j, 0, 600, hs, flat(1000), flat(2000))
	wantVerdict(t, j, 600, Idle, "", "idle tunnel")
	if age, ok := j.HandshakeAge(at(600)); !ok || age != time.Hour+600*time.Second {
		t.Fatalf("handshake age %v %v", age, ok)
	}
	// Positive control: the same tunnel starts sending and nothing comes
	// back: dead (the handshake is older than REJECT_AFTER_TIME, so a
	// new one had REKEY_TIMEOUT to complete).
	feed(j, 601, 607, hs, growing(1000), flat(2000))
	wantVerdict(t, j, 607, Dead, "REJECT_AFTER_TIME", "sending into a dead tunnel")
}

func TestSendingWithoutAnswer(t *testing.T) {
	// A fresh session (handshake 10 s before): WireGuard keeps sending on
	// it and starts a new handshake only after KEEPALIVE+REKEY timeouts.
	j := &Judge{}
	hs := t0.Add(-10 * time.Second)
	feed(j, 0, 0, hs, flat(0), flat(0))
	feed(j, 1, 15, hs, growing(0), flat(0))
	if v, _ := j.Verdict(at(15)); v == Dead {
		t.Fatalf("dead after 15 s of sending on a fresh session; WireGuard itself waits %v", DefaultSilence)
	}
	feed(j, 16, 16, hs, growing(0), flat(0))
	wantVerdict(t, j, 16, Dead, "without an answer", "sending without an answer")
	// An answer (rx grows) clears it.
	feed(j, 17, 17, hs, growing(0), flat(50))
	wantVerdict(t, j, 17, Alive, "", "after an answer")
}

// Keepalives are sent and never answered: a passive one after the last
// data, or a persistent one every 25 s, is not sending into a dead
// tunnel.
func TestKeepalivesAreNotSending(t *testing.T) {
	j := &Judge{}
	hs := t0
	feed(j, 0, 10, hs, growing(0), growing(0))
	// Traffic stops; a passive keepalive at +10 s, then persistent ones
	// every 25 s, for five minutes.
	tx := func(s int) int64 {
		n := int64(1000)
		if s >= 20 {
			n += KeepaliveBytes
		}
		if s >= 25 {
			n += int64((s-25)/25+1) * KeepaliveBytes
		}
		return n
	}
	feed(j, 11, 300, hs, tx, flat(1000))
	wantVerdict(t, j, 300, Idle, "", "keepalives only")
	// Positive control: real data without an answer is still dead.
	feed(j, 301, 317, hs, func(s int) int64 { return tx(300) + int64(s-300)*500 }, flat(1000))
	wantVerdict(t, j, 317, Dead, "", "data without an answer after keepalives")
}

func TestAnsweredTrafficIsAlive(t *testing.T) {
	j := &Judge{}
	hs := t0
	feed(j, 0, 100, hs, growing(0), growing(0))
	wantVerdict(t, j, 100, Alive, "", "answered traffic")
}

func TestHandshakeCompletesIsAlive(t *testing.T) {
	// The first packets trigger a handshake; it completes at second 3.
	// A new handshake alone is an answer (rx left flat here on purpose)
	// and restarts the silence clock.
	j := &Judge{}
	feed(j, 0, 0, time.Time{}, flat(0), flat(0))
	feed(j, 1, 2, time.Time{}, growing(0), flat(0))
	feed(j, 3, 18, at(3), growing(0), flat(0))
	wantVerdict(t, j, 18, Alive, "", "a handshake completed")
	// Positive control: never a handshake. WireGuard gives the first
	// handshake REKEY_TIMEOUT (plus jitter): dead after that, not before.
	k := &Judge{}
	feed(k, 0, 0, time.Time{}, flat(0), flat(0))
	feed(k, 1, 5, time.Time{}, growing(0), flat(0))
	if v, cause := k.Verdict(at(5)); v == Dead {
		t.Fatalf("dead %q before REKEY_TIMEOUT passed", cause)
	}
	feed(k, 6, 6, time.Time{}, growing(0), flat(0))
	if v, cause := k.Verdict(at(6)); v != Dead || !strings.Contains(cause, "no handshake ever") {
		t.Fatalf("never a handshake: %v (%q), want dead", v, cause)
	}
}

// After a Reset (the peer was replaced), the first sample already counts
// the handshake initiation: the clock starts there.
func TestFirstSampleAfterReset(t *testing.T) {
	j := &Judge{}
	j.Observe(Sample{At: t0, Tx: 148, Readable: true})
	feed(j, 1, 5, time.Time{}, flat(148), flat(0))
	if v, _ := j.Verdict(at(5.3)); v == Dead {
		t.Fatal("dead before REKEY_TIMEOUT+jitter")
	}
	feed(j, 6, 6, time.Time{}, flat(148), flat(0))
	wantVerdict(t, j, 6, Dead, "", "a replaced peer that never answered its initiation")
	// Control: a first sample with an answer, or nothing sent, is not.
	k := &Judge{}
	k.Observe(Sample{At: t0, Tx: 148, Rx: 92, LastHandshake: t0, Readable: true})
	feed(k, 1, 30, t0, flat(148), flat(92))
	if v, _ := k.Verdict(at(30)); v == Dead || !k.Answered() {
		t.Fatalf("%v, answered %v: a replaced peer that answered (rx counted since the reset) works, idle or not", v, k.Answered())
	}
	i := &Judge{}
	i.Observe(Sample{At: t0, Readable: true})
	feed(i, 1, 30, time.Time{}, flat(0), flat(0))
	if v, _ := i.Verdict(at(30)); v != Idle || i.Answered() {
		t.Fatalf("%v answered %v: nothing sent is idle, and no answer", v, i.Answered())
	}
}

func TestProbeFailuresInARow(t *testing.T) {
	j := &Judge{Failures: 3}
	j.Probe(false, "connect: timeout")
	j.Probe(false, "connect: timeout")
	j.Probe(true, "")
	j.Probe(false, "connect: timeout")
	j.Probe(false, "connect: timeout")
	if v, _ := j.Verdict(t0); v == Dead {
		t.Fatal("dead after two failures in a row (a success in between)")
	}
	j.Probe(false, "connect: timeout")
	v, cause := j.Verdict(t0)
	if v != Dead || !strings.Contains(cause, "3 times") || !strings.Contains(cause, "timeout") {
		t.Fatalf("verdict %v (%q), want dead after 3 in a row", v, cause)
	}
	j.Reset()
	if v, _ := j.Verdict(t0); v != Unknown || j.Failures != 3 {
		t.Fatalf("after Reset: %v, failures %d", v, j.Failures)
	}
}

func TestUnreadableSamplesIgnored(t *testing.T) {
	j := &Judge{}
	j.Observe(Sample{At: t0})
	wantVerdict(t, j, 100, Unknown, "", "no readable sample")
}

// fakeSwitcher records the switches; fail makes the listed servers'
// switches fail.
type fakeSwitcher struct {
	calls []string
	fail  map[int]bool
}

func (f *fakeSwitcher) Switch(server int, retry bool) error {
	if retry {
		f.calls = append(f.calls, fmt.Sprintf("retry %d", server))
	} else {
		f.calls = append(f.calls, fmt.Sprintf("switch %d", server))
	}
	if f.fail[server] {
		return errors.New("injected")
	}
	return nil
}

// step reports dead at now and carries out the action, if any.
func step(t *testing.T, r *Recovery, sw Switcher, now time.Time) bool {
	t.Helper()
	a, ok := r.Dead(now, "test")
	if ok {
		r.Apply(now, a, sw)
	}
	return ok
}

func TestRecoveryOrder(t *testing.T) {
	sw := &fakeSwitcher{}
	r := &Recovery{Pool: 3}
	now := t0
	for range 4 {
		step(t, r, sw, now)
		now = now.Add(20 * time.Second)
	}
	want := "retry 0,switch 1,switch 2,switch 0"
	if got := strings.Join(sw.calls, ","); got != want {
		t.Fatalf("actions %s, want %s", got, want)
	}
	if st, _ := r.State(); st != AllDead {
		t.Fatalf("state %s after every server failed, want %s", st, AllDead)
	}
	if r.Active != 0 || r.Failovers != 3 {
		t.Fatalf("active %d failovers %d", r.Active, r.Failovers)
	}
	// Backing off: nothing for MinBackoff, then round-robin on.
	b, next := r.Backoff()
	if b != MinBackoff {
		t.Fatalf("backoff %v", b)
	}
	if step(t, r, sw, next.Add(-time.Millisecond)) {
		t.Fatal("attempt during the backoff")
	}
	step(t, r, sw, next)
	if sw.calls[len(sw.calls)-1] != "switch 1" {
		t.Fatalf("after the backoff: %s, want switch 1", sw.calls[len(sw.calls)-1])
	}
	// The backoff doubles up to MaxBackoff.
	var last time.Duration
	for range 20 {
		_, next = r.Backoff()
		step(t, r, sw, next)
		last, _ = r.Backoff()
	}
	if last != MaxBackoff {
		t.Fatalf("backoff %v after many rounds, want %v", last, MaxBackoff)
	}
	// A server answers: healthy on it (a fallback is healthy), and the
	// next death starts with a retry of that server.
	r.Alive()
	if st, _ := r.State(); st != Healthy {
		t.Fatalf("state %s", st)
	}
	if b, _ := r.Backoff(); b != 0 {
		t.Fatalf("backoff %v after recovery", b)
	}
	sw.calls = nil
	active := r.Active
	step(t, r, sw, next.Add(time.Hour))
	step(t, r, sw, next.Add(2*time.Hour))
	want = fmt.Sprintf("retry %d,switch %d", active, (active+1)%3)
	if got := strings.Join(sw.calls, ","); got != want {
		t.Fatalf("after recovery: %s, want %s", got, want)
	}
}

func TestRecoveryRetryThenFailover(t *testing.T) {
	// The retry brings the server back: no failover.
	sw := &fakeSwitcher{}
	r := &Recovery{Pool: 2}
	step(t, r, sw, t0)
	if st, _ := r.State(); st != Retrying {
		t.Fatalf("state %s", st)
	}
	r.Alive()
	step(t, r, sw, at(100))
	if got := strings.Join(sw.calls, ","); got != "retry 0,retry 0" {
		t.Fatalf("actions %s", got)
	}
	if r.Failovers != 0 || r.Active != 0 {
		t.Fatalf("failovers %d active %d", r.Failovers, r.Active)
	}
}

func TestRecoveryFailedSwitchKeepsActive(t *testing.T) {
	sw := &fakeSwitcher{fail: map[int]bool{1: true}}
	r := &Recovery{Pool: 3}
	step(t, r, sw, t0)     // retry 0
	step(t, r, sw, at(20)) // switch 1 fails: still on 0
	if r.Active != 0 || r.Failovers != 0 {
		t.Fatalf("active %d failovers %d after a failed switch", r.Active, r.Failovers)
	}
	if _, cause := r.State(); !strings.Contains(cause, "injected") {
		t.Fatalf("cause %q does not name the failed switch", cause)
	}
	step(t, r, sw, at(40)) // round-robin from the failed attempt: switch 2
	if got := strings.Join(sw.calls, ","); got != "retry 0,switch 1,switch 2" {
		t.Fatalf("actions %s", got)
	}
}

func TestRecoverySingleServer(t *testing.T) {
	sw := &fakeSwitcher{}
	r := &Recovery{Pool: 1}
	step(t, r, sw, t0)
	step(t, r, sw, at(20))
	if got := strings.Join(sw.calls, ","); got != "retry 0,switch 0" {
		t.Fatalf("actions %s", got)
	}
	if st, _ := r.State(); st != AllDead {
		t.Fatalf("state %s, want %s", st, AllDead)
	}
}
