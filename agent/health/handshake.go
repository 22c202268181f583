package health

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// WireGuard's own timers (the protocol's, in wireguard-go and the kernel):
// a session that sends data rekeys after RekeyAfterTime, and no data is
// sent on a session older than RejectAfterTime.
const (
	RekeyAfterTime  = 120 * time.Second
	RejectAfterTime = 180 * time.Second
)

// rekeyAfter and rejectAfter are the timers judge applies: variables
// only so that tests can lower them.
var rekeyAfter, rejectAfter = RekeyAfterTime, RejectAfterTime

// peerSample is what the handshake judgement needs of one peer.
type peerSample struct {
	ID        string // a digest of the public key, never the key
	Handshake time.Time
	TxBytes   int64
	Keepalive time.Duration
}

// txMark is a peer's transmit counter when its current handshake was
// first seen at least rekeyAfter old: tx above it means the tunnel sent
// on a session that WireGuard must rekey before it sends on it.
type txMark struct {
	Handshake time.Time `json:"handshake"`
	TxBytes   int64     `json:"txBytes"`
}

// verdict is the judgement of one peer's handshake.
type verdict struct {
	Fresh bool   // this peer answers (or nothing needed it to)
	Idle  bool   // the handshake is old but nothing was sent that needed a new one
	Stale string // why the peer is not answering, if it is not
}

// judge decides whether a peer is answering. With PersistentKeepalive,
// a handshake older than rejectAfter plus the interval is stale. Without
// it (as provider files ship), an old handshake is fine while the tunnel
// is idle, but not when it sent after rekeyAfter: a sending session
// rekeys then, and WireGuard sends no data after rejectAfter without a
// handshake. A peer that never handshook and was never sent anything is
// idle too: WireGuard handshakes only when it has something to send.
// mark is the peer's txMark (zero Handshake: none yet).
func judge(now time.Time, p peerSample, mark txMark) verdict {
	if p.Handshake.IsZero() {
		if p.TxBytes == 0 {
			return verdict{Fresh: true, Idle: true}
		}
		return verdict{}
	}
	age := now.Sub(p.Handshake)
	if p.Keepalive > 0 {
		if age < rejectAfter+p.Keepalive {
			return verdict{Fresh: true}
		}
		return verdict{Stale: fmt.Sprintf("handshake stale with keepalive %s (last handshake %s ago)", p.Keepalive, age.Round(time.Second))}
	}
	if age < rejectAfter {
		return verdict{Fresh: true}
	}
	if mark.Handshake.Equal(p.Handshake) && p.TxBytes > mark.TxBytes {
		return verdict{Stale: fmt.Sprintf("handshake stale while sending (last handshake %s ago, tx grew by %d B since it was due for renewal): the peer is not answering", age.Round(time.Second), p.TxBytes-mark.TxBytes)}
	}
	return verdict{Fresh: true, Idle: true}
}

// nextMarks keeps each peer's mark while its handshake is unchanged, and
// takes a new one at the current counter once a handshake is rekeyAfter
// old. Peers whose handshake is younger have none.
func nextMarks(now time.Time, peers []peerSample, old map[string]txMark) map[string]txMark {
	out := make(map[string]txMark, len(peers))
	for _, p := range peers {
		if p.Handshake.IsZero() || now.Sub(p.Handshake) < rekeyAfter {
			continue
		}
		if m, ok := old[p.ID]; ok && m.Handshake.Equal(p.Handshake) {
			out[p.ID] = m
		} else {
			out[p.ID] = txMark{Handshake: p.Handshake, TxBytes: p.TxBytes}
		}
	}
	return out
}

// readMarks reads the marks recorded for a namespace; none if absent.
func readMarks(path string) map[string]txMark {
	m := map[string]txMark{}
	if b, err := os.ReadFile(path); err == nil {
		json.Unmarshal(b, &m)
	}
	return m
}

// writeMarks records the marks (no keys: peers are named by a digest).
// Only when the runtime directory exists: the agent made it.
func writeMarks(path string, m map[string]txMark) {
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return
	}
	b, _ := json.Marshal(m)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".txmarks-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr == nil && cerr == nil && os.Chmod(tmp.Name(), 0o644) == nil && os.Rename(tmp.Name(), path) == nil {
		return
	}
	os.Remove(tmp.Name())
}
