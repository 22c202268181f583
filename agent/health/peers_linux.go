package health

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// DeviceReader reads the tunnel's live device, without key material:
// the agent passes its check's one reading of its own device.
type DeviceReader interface {
	Device() (*wireguard.Device, error)
}

// inspectPeers reads the tunnel's peers (never its keys) through dev (nil:
// wgctrl, as status does) and judges whether any is answering (see
// judge). It records each peer's tx counter at a new handshake, so that a
// later look can tell idle from dead.
//
// With agentJudges (a running agent records its own judgement, which
// status shows), a peer that never handshook although the tunnel sent is
// left to the agent: it gives the first handshake REKEY_TIMEOUT to
// complete, where one reading would call every handshake in flight a
// failure.
func inspectPeers(r *Report, dev DeviceReader, agentJudges bool) {
	var d *wireguard.Device
	var err error
	if dev != nil {
		d, err = dev.Device()
	} else {
		d, err = wireguard.ReadPeers(r.Name, r.Interface)
	}
	if err != nil {
		if r.Link.Up {
			r.Add(WireGuardUnreadable, "cannot read WireGuard state: %v", err)
		}
		return
	}
	now := time.Now()
	samples := samplesOf(d.Peers)
	next := updateMarks(r.Name, now, samples)
	fresh, stale := false, ""
	routed := slices.ContainsFunc(d.Peers, func(p wgtypes.Peer) bool { return len(p.AllowedIPs) > 0 })
	for i, p := range d.Peers {
		pr := Peer{RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes, Keepalive: p.PersistentKeepaliveInterval.Seconds()}
		if p.Endpoint != nil {
			pr.Endpoint = p.Endpoint.String()
		}
		if !p.LastHandshakeTime.IsZero() {
			t := p.LastHandshakeTime.UTC()
			age := now.Sub(p.LastHandshakeTime).Seconds()
			pr.LatestHandshake, pr.HandshakeAgeSec = &t, &age
		}
		if routed && len(p.AllowedIPs) == 0 {
			// The warm standby: it carries nothing; its handshake age is
			// shown, not judged with the tunnel's.
			pr.Standby = true
			r.Peers = append(r.Peers, pr)
			continue
		}
		v := judge(now, samples[i], next[samples[i].ID])
		pr.Idle = v.Idle
		if v.Fresh {
			fresh = true
		} else if stale == "" {
			stale = v.Stale
		}
		r.Peers = append(r.Peers, pr)
	}
	switch {
	case fresh:
	case stale != "":
		r.Add(HandshakeStale, "%s", stale)
	case !agentJudges:
		r.Add(HandshakeStale, "no handshake with any peer, though the tunnel sent")
	}
}

// MarkTx records the tx counters of peers (as the agent just read its
// device) at a new handshake without judging them: the agent calls it
// every check, so that the mark is taken right after each handshake and
// status can tell idle from dead. The file is written only when a mark
// changes.
func MarkTx(name string, peers []wgtypes.Peer) {
	updateMarks(name, time.Now(), samplesOf(peers))
}

// updateMarks takes the marks of namespace name to what samples make of
// them (nextMarks), writing the file only when a mark changed.
func updateMarks(name string, now time.Time, samples []peerSample) map[string]txMark {
	p := names.TxMarks(name)
	old := readMarks(p)
	next := nextMarks(now, samples, old)
	if !maps.Equal(next, old) {
		writeMarks(p, next)
	}
	return next
}

func samplesOf(peers []wgtypes.Peer) []peerSample {
	var out []peerSample
	for _, p := range peers {
		id := sha256.Sum256(p.PublicKey[:])
		out = append(out, peerSample{ID: hex.EncodeToString(id[:8]), Handshake: p.LastHandshakeTime, TxBytes: p.TransmitBytes, Keepalive: p.PersistentKeepaliveInterval})
	}
	return out
}
