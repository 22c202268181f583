package health

import (
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// Watcher inspects one namespace check after check, as its agent's
// watchdog does: like Check, but a kill-switch table (the namespace's,
// and the host link's host table) is read back only when its
// namespace's ruleset generation moved since it was last found to match,
// and at least every DefaultBackstop anyway (see Gate). When a read is
// skipped, the report's Policy is the last full read's (its drop counters
// as of then).
type Watcher struct {
	Table, Host Gate
	gens        []*policy.GenWatch
}

// NewWatcher watches the namespace name and the agent's own (host)
// namespace. Close releases its sockets.
func NewWatcher(name string) *Watcher {
	ns, host := policy.NewGenWatch(names.Netns(name)), policy.NewGenWatch("")
	return &Watcher{Table: Gate{Gens: ns}, Host: Gate{Gens: host}, gens: []*policy.GenWatch{ns, host}}
}

// Check inspects the namespace of s as Check does, through the gates.
func (w *Watcher) Check(s *config.Spec, t wireguard.Tunnel, fwd policy.Forwarded) *Report {
	return Inspect(Target{Name: s.Name, Spec: s, Tunnel: t, Forwarded: fwd, gates: w})
}

// Close closes the generation sockets.
func (w *Watcher) Close() {
	for _, g := range w.gens {
		g.Close()
	}
}
