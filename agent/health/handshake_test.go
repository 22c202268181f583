package health

import (
	"strings"
	"testing"
	"time"
)

// A peer's life on a fake clock: each look takes marks as inspectPeers
// does and judges the peer.
type peerLife struct {
	t0    time.Time
	p     peerSample
	marks map[string]txMark
}

func newLife(keepalive time.Duration) *peerLife {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &peerLife{t0: t0, p: peerSample{ID: "p1", Handshake: t0, TxBytes: 100, Keepalive: keepalive}, marks: map[string]txMark{}}
}

// look at `at` after the first handshake, with tx bytes sent so far.
func (l *peerLife) look(at time.Duration, tx int64) verdict {
	now := l.t0.Add(at)
	l.p.TxBytes = tx
	l.marks = nextMarks(now, []peerSample{l.p}, l.marks)
	return judge(now, l.p, l.marks[l.p.ID])
}

// Issue 12.11: a provider killed after the handshake, the tunnel still
// sending (curl retrying), is reported stale once the handshake is older
// than REJECT_AFTER_TIME; before that it is fresh.
func TestHandshakeStaleWhileSending(t *testing.T) {
	l := newLife(0)
	if v := l.look(time.Second, 200); !v.Fresh || v.Idle {
		t.Errorf("1 s after the handshake: %+v, want fresh", v)
	}
	if v := l.look(125*time.Second, 300); !v.Fresh {
		t.Errorf("125 s: %+v, want fresh (rekey is due, not overdue)", v)
	}
	if v := l.look(170*time.Second, 900); !v.Fresh {
		t.Errorf("170 s, sending: %+v, want fresh (below REJECT_AFTER_TIME)", v)
	}
	v := l.look(200*time.Second, 1500)
	if v.Fresh || v.Idle || !strings.Contains(v.Stale, "handshake stale while sending") || !strings.Contains(v.Stale, "3m20s ago") || !strings.Contains(v.Stale, "tx grew by 1200 B") {
		t.Errorf("200 s after the handshake, tx grew: %+v, want stale naming the age and the growth", v)
	}
}

// An idle tunnel (nothing sent since the session was due for renewal) is
// not dead, however old its handshake: it is fresh and idle. That holds
// also when it sent a burst right after the handshake (before a rekey
// was due), which needed no new handshake.
func TestHandshakeOldButIdle(t *testing.T) {
	l := newLife(0)
	l.look(time.Second, 100)
	l.look(10*time.Second, 50000) // a burst, then nothing
	l.look(121*time.Second, 50000)
	for _, at := range []time.Duration{181 * time.Second, 10 * time.Minute, 3 * time.Hour} {
		if v := l.look(at, 50000); !v.Fresh || !v.Idle || v.Stale != "" {
			t.Errorf("%s after the handshake, nothing sent since: %+v, want fresh and idle", at, v)
		}
	}
	// The control: the same tunnel sending again with no new handshake.
	if v := l.look(3*time.Hour+time.Minute, 50092); v.Fresh || v.Stale == "" {
		t.Errorf("sending again without a handshake: %+v, want stale", v)
	}
}

// The first look may come long after the handshake (status alone, no
// agent sampling): idle then, and stale on a later look if tx grew.
func TestHandshakeFirstLookLate(t *testing.T) {
	l := newLife(0)
	if v := l.look(10*time.Minute, 7000); !v.Fresh || !v.Idle {
		t.Errorf("first look at 10 min: %+v, want fresh and idle (nothing known to have been sent since)", v)
	}
	if v := l.look(11*time.Minute, 7000); !v.Idle {
		t.Errorf("no growth: %+v, want idle", v)
	}
	if v := l.look(12*time.Minute, 7148); v.Fresh {
		t.Errorf("growth: %+v, want stale", v)
	}
}

// A new handshake starts a new mark: the tx growth that came with it is
// not held against the new session.
func TestHandshakeRenewedResetsMark(t *testing.T) {
	l := newLife(0)
	l.look(130*time.Second, 1000)
	l.p.Handshake = l.t0.Add(140 * time.Second) // the rekey succeeded
	if v := l.look(150*time.Second, 2000); !v.Fresh || v.Idle {
		t.Errorf("after a rekey: %+v, want fresh", v)
	}
	if _, ok := l.marks["p1"]; ok {
		t.Errorf("a young handshake keeps the old session's mark: %+v", l.marks)
	}
	if v := l.look(140*time.Second+200*time.Second, 2000); !v.Idle {
		t.Errorf("old again but no growth since its mark: %+v, want idle", v)
	}
}

// With PersistentKeepalive, the handshake is renewed whatever the
// traffic: older than REJECT_AFTER_TIME plus the interval is stale.
func TestHandshakeKeepalive(t *testing.T) {
	l := newLife(25 * time.Second)
	if v := l.look(200*time.Second, 100); !v.Fresh || v.Idle {
		t.Errorf("200 s with keepalive 25 s: %+v, want fresh", v)
	}
	if v := l.look(206*time.Second, 100); v.Fresh || !strings.Contains(v.Stale, "keepalive 25s") {
		t.Errorf("206 s with keepalive 25 s: %+v, want stale", v)
	}
}

// Never handshaken: not fresh once the tunnel sent (inspectPeers reports
// no handshake); idle while nothing was sent (nothing needed one).
func TestHandshakeNever(t *testing.T) {
	if v := judge(time.Now(), peerSample{ID: "p", TxBytes: 148}, txMark{}); v.Fresh || v.Idle || v.Stale != "" {
		t.Errorf("no handshake, sent: %+v", v)
	}
	if v := judge(time.Now(), peerSample{ID: "p"}, txMark{}); !v.Fresh || !v.Idle || v.Stale != "" {
		t.Errorf("no handshake, nothing sent: %+v, want fresh and idle", v)
	}
}

// The marks file round-trips and is written only where the agent made
// the runtime directory.
func TestMarksFile(t *testing.T) {
	dir := t.TempDir()
	m := map[string]txMark{"p1": {Handshake: time.Unix(1700000000, 0).UTC(), TxBytes: 42}}
	writeMarks(dir+"/txmarks.json", m)
	if got := readMarks(dir + "/txmarks.json"); got["p1"] != m["p1"] {
		t.Errorf("read back %+v, want %+v", got, m)
	}
	writeMarks(dir+"/missing/txmarks.json", m)
	if got := readMarks(dir + "/missing/txmarks.json"); len(got) != 0 {
		t.Errorf("written without its directory: %+v", got)
	}
}
