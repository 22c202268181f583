// Package metrics serves a namespace's health to monitoring, in the host
// namespace: /metrics (Prometheus exposition), /healthz and /readyz.
//
// The daemon feeds it: Publish after each health inspection (a snapshot
// that every scrape and /healthz read whole, so values are consistent),
// Ready once the namespace is up, the failover loop's state (Recovering)
// and the event counters (Repaired, FailedOver, ProbeFailed, ProbedEarly), which live
// here as atomic counters because no report carries them. Nothing here
// reads the namespace itself, and no key is ever exposed: the snapshot
// holds a health.Report (which has none) and, of the config, the
// namespace name, config file paths and peer endpoints only.
package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
)

// Snapshot is what one scrape or health request sees.
type Snapshot struct {
	Report *health.Report // the latest inspection; nil before the first
	At     time.Time      // when it was published
	Ready  bool           // the namespace is up
	Server int            // the active server: its index in the pool
	// Recovery is the failover loop's state ("": not known yet).
	Recovery liveness.State
	// PortForward is the port forwarding's latest status (nil: off).
	PortForward *portforward.Status
	// Standby is the warm standby (issue 25); nil in a pool of one.
	Standby *Standby
}

// Standby is the warm standby as the daemon judged it: its server's
// index (-1: none), whether it is warm, and the moves back to the
// preferred server so far.
type Standby struct {
	Server    int
	Warm      bool
	MovesBack int
}

// server is what server_info shows of one server of the pool.
type server struct {
	configFile, endpoint string
}

// Metrics is one namespace's monitoring state. Its methods are safe for
// concurrent use, and a nil *Metrics ignores every call (metrics off).
type Metrics struct {
	name    string
	servers []server

	snap atomic.Pointer[Snapshot]
	mu   sync.Mutex // serialises snapshot updates (read-modify-write)

	repairs     [numKinds]atomic.Uint64
	failovers   atomic.Uint64
	probeFails  atomic.Uint64
	probesEarly atomic.Uint64
}

// New prepares the metrics of spec s's namespace (not yet ready, no
// report).
func New(s *config.Spec) *Metrics {
	m := &Metrics{name: s.Name}
	pool := s.Pool
	if len(pool) == 0 {
		pool = []*config.Spec{s}
	}
	for _, p := range pool {
		var eps []string
		for _, peer := range p.Peers {
			if peer.Endpoint != "" {
				eps = append(eps, peer.Endpoint)
			}
		}
		m.servers = append(m.servers, server{configFile: p.ConfigFile(), endpoint: strings.Join(eps, ",")})
	}
	m.snap.Store(&Snapshot{Server: s.Server})
	return m
}

// Snapshot is the current snapshot (never nil for a non-nil m).
func (m *Metrics) Snapshot() *Snapshot {
	if m == nil {
		return &Snapshot{}
	}
	return m.snap.Load()
}

func (m *Metrics) update(f func(*Snapshot)) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := *m.snap.Load()
	f(&s)
	m.snap.Store(&s)
}

// Publish makes r the report that scrapes and /healthz see. r must not
// be changed afterwards.
func (m *Metrics) Publish(r *health.Report) {
	m.update(func(s *Snapshot) { s.Report, s.At = r, time.Now() })
}

// SetStandby publishes the warm standby (nil: a pool of one).
func (m *Metrics) SetStandby(sb *Standby) {
	m.update(func(s *Snapshot) { s.Standby = sb })
}

// PortForwarded publishes the port forwarding's status.
func (m *Metrics) PortForwarded(st portforward.Status) {
	m.update(func(s *Snapshot) { s.PortForward = &st })
}

// Ready marks the namespace up (/readyz answers 200 from now on).
func (m *Metrics) Ready() { m.update(func(s *Snapshot) { s.Ready = true }) }

// Repaired counts a repair of a problem of kind k (the daemon calls it
// for each problem a successful repair fixed).
func (m *Metrics) Repaired(k health.Kind) {
	if m == nil || !repairable(k) {
		return
	}
	m.repairs[k].Add(1)
}

// FailedOver counts a failover to server index to of the pool, which
// becomes the active server.
func (m *Metrics) FailedOver(to int) {
	if m == nil {
		return
	}
	m.failovers.Add(1)
	m.update(func(s *Snapshot) { s.Server = to })
}

// Recovering publishes the failover loop's state.
func (m *Metrics) Recovering(st liveness.State) {
	if m == nil || m.Snapshot().Recovery == st {
		return
	}
	m.update(func(s *Snapshot) { s.Recovery = st })
}

// ProbeFailed counts a failed health probe through the tunnel.
func (m *Metrics) ProbeFailed() {
	if m == nil {
		return
	}
	m.probeFails.Add(1)
}

// ProbedEarly counts a health probe the passive trigger sent before its
// tick (traffic without an answer).
func (m *Metrics) ProbedEarly() {
	if m == nil {
		return
	}
	m.probesEarly.Add(1)
}
