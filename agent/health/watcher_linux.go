package health

import (
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// Watcher inspects one namespace check after check, as its agent's
// watchdog does: like Check, but a kill-switch table (the namespace's,
// and the host link's host table) is read back only when its
// namespace's ruleset generation moved since it was last found to match,
// the tunnel link and default routes only after an rtnetlink event in the
// namespace, and each at least every DefaultBackstop anyway (see Gate).
// When a read is skipped, the report's Policy and Link are the last full
// read's (the drop counters as of then).
type Watcher struct {
	Table Gate[Policy]
	Link  Gate[Link]
	Host  Gate[struct{}]
	Pin   Gate[struct{}] // the endpoint pin table, also in the host namespace
	// Ruleset is Target.Ruleset for every check (nil: policy.Compile).
	Ruleset func(*config.Spec) (*policy.Ruleset, error)
	// PinRuleset is Target.Pin for every check (nil: not checked).
	PinRuleset func() (*policy.Ruleset, error)
	socks      []interface{ Close() }
}

// NewWatcher watches the namespace name and the agent's own (host)
// namespace. Close releases its sockets.
func NewWatcher(name string) *Watcher {
	ns, rt, host := policy.NewGenWatch(netns.Path(name)), newRTWatch(name), policy.NewGenWatch("")
	return &Watcher{
		Table: Gate[Policy]{Gens: ns}, Link: Gate[Link]{Gens: rt}, Host: Gate[struct{}]{Gens: host}, Pin: Gate[struct{}]{Gens: host},
		socks: []interface{ Close() }{ns, rt, host},
	}
}

// Check inspects the namespace of s as Check does, through the gates.
func (w *Watcher) Check(s *config.Spec, t wireguard.Tunnel, fwd policy.Forwarded) *Report {
	return Inspect(Target{Name: s.Name, Spec: s, Tunnel: t, Forwarded: fwd, Ruleset: w.Ruleset, Pin: w.PinRuleset, gates: w})
}

// Observe inspects as Check does and also reads the WireGuard peers, as
// status does (for metrics); a skipped table read still reads the drop
// counters, so they are current. The peers are read through dev (nil:
// wgctrl).
func (w *Watcher) Observe(s *config.Spec, t wireguard.Tunnel, fwd policy.Forwarded, dev DeviceReader) *Report {
	return Inspect(Target{Name: s.Name, Spec: s, Tunnel: t, Forwarded: fwd, Peers: true, Device: dev, Ruleset: w.Ruleset, Pin: w.PinRuleset, gates: w})
}

// Close closes the sockets the gates read.
func (w *Watcher) Close() {
	for _, s := range w.socks {
		s.Close()
	}
}
