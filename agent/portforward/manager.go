package portforward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// Lease is one mapping as the gateway granted it.
type Lease struct {
	Protocol           string // "tcp" or "udp"
	Internal, External uint16
	Lifetime           time.Duration
	Epoch              uint32 // the gateway's seconds since the start of its epoch
}

// Gateway asks the NAT-PMP gateway for one mapping; lifetime 0 deletes it.
type Gateway interface {
	Map(ctx context.Context, protocol string, internal, external uint16, lifetime time.Duration) (Lease, error)
}

// Dialer opens a gateway client for one round of requests (a socket in the
// namespace, so the requests go through the tunnel); done releases it.
type Dialer func(ctx context.Context, gateway netip.Addr) (g Gateway, done func(), err error)

// Host is where the manager meets the daemon.
type Host interface {
	// Open makes the kill switch's forwarded-port sets hold f, in one
	// netlink batch. It fails, changing nothing, when gen is not the
	// current generation (the server changed since the lease was granted).
	Open(gen uint64, f policy.Forwarded) error
	// Record publishes s: the state file, the forwarded_port file, metrics.
	Record(s Status)
}

// Pusher hands the port to an application; port 0: the port was lost.
type Pusher interface {
	Name() string
	Push(ctx context.Context, port uint16, protocols []string) error
}

// Reporter is a Pusher with something to say about a push that worked
// (the onChange command: its exit code and the start of its output). The
// manager pushes to it with PushReport and logs what it says with the
// success, as it logs the error of a push that failed.
type Reporter interface {
	Pusher
	PushReport(ctx context.Context, port uint16, protocols []string) (string, error)
}

// Options configure a Manager.
type Options struct {
	Spec *config.PortForwardSpec
	Dial Dialer
	Host Host
	// Apps are pushed the port at every grant and renewal (an application
	// restarted meanwhile gets it back within half a lease).
	Apps []Pusher
	// OnChange is pushed only when the port is new, changed or lost.
	OnChange Pusher
	Log      *slog.Logger
	// Restarted is the RFC 6886 epoch check (natpmp.Restarted).
	Restarted func(prevEpoch uint32, prevAt time.Time, epoch uint32, at time.Time) bool
	// Backoff is the first retry delay after a failure, doubled up to 30
	// times it (default 1 s: retries after 1, 2, 4, 8, 16, 30, 30 ... s).
	Backoff time.Duration
	// Gen is the generation of the kill switch's forwarded-port sets the
	// manager starts in (one started by a reload comes after others).
	Gen uint64
}

// Bounds on every call the manager makes.
const (
	requestTimeout = 5 * time.Second  // one mapping request (the client's own retries are shorter)
	pushTimeout    = 40 * time.Second // one push (a command has 30 s of its own)
	finalTimeout   = 10 * time.Second // the pushes that announce the port lost at shutdown
	maxBackoff     = 30               // times Options.Backoff
)

// Manager keeps the forwarded port. Run it in a goroutine of its own.
type Manager struct {
	o     Options
	log   *slog.Logger
	reset chan resetReq
	jobs  chan pushJob

	mu sync.Mutex
	st Status
}

type resetReq struct {
	gen  uint64
	spec *config.PortForwardSpec
}

// New returns a manager for o; it does nothing until Run.
func New(o Options) *Manager {
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Manager{o: o, log: o.Log.With("part", "port forwarding"), reset: make(chan resetReq, 1), jobs: make(chan pushJob, 1)}
}

// Reset says that the kill switch's forwarded-port sets were emptied with
// the server they belonged to (a failover, a rebuild): the lease is gone,
// gen is the new generation and spec the new server's. It never blocks.
func (m *Manager) Reset(gen uint64, spec *config.PortForwardSpec) {
	for {
		select {
		case m.reset <- resetReq{gen, spec}:
			return
		default:
			select { // replace a reset not taken yet
			case <-m.reset:
			default:
			}
		}
	}
}

// lease is what the manager holds between rounds.
type lease struct {
	port, external uint16
	fwd            policy.Forwarded
	expires        time.Time
	epoch          uint32
	epochAt        time.Time
	ext            map[string]uint16 // per protocol, asked again at renewal ("rfc")
}

func (l *lease) live() bool { return l != nil && l.port != 0 }

// Run keeps the port until ctx ends: then the port is announced lost (the
// kill switch goes with the namespace) and Run returns.
func (m *Manager) Run(ctx context.Context) {
	quit, pushDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(pushDone); m.pushLoop(quit) }()
	defer func() { <-pushDone }()
	defer close(quit)

	spec, gen := m.o.Spec, m.o.Gen
	cur := &lease{}
	m.update(func(s *Status) {
		*s = Status{State: StateRequesting, Gateway: spec.Gateway.String(), Protocols: spec.Protocols}
	})
	failures := 0
	wait := time.Duration(0)
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			m.stop(cur, spec.Protocols)
			return
		case r := <-m.reset:
			t.Stop()
			spec, gen = r.spec, r.gen
			if cur.live() {
				m.log.Info("the server changed: its forwarded port is closed, asking the new gateway", "port", cur.port)
				m.announceLost(spec.Protocols)
			}
			cur, failures, wait = &lease{}, 0, 0
			m.update(func(s *Status) {
				s.State, s.Gateway, s.Port, s.ExternalPort, s.Expires, s.Error = StateRequesting, spec.Gateway.String(), 0, 0, time.Time{}, ""
			})
			continue
		case <-t.C:
		}
		next, again, err := m.round(ctx, spec, gen, cur)
		switch {
		case err == nil:
			cur, failures = next, 0
			wait = renewal(next, spec.Lifetime, time.Now())
			if again {
				wait = 0
			}
		case ctx.Err() != nil:
			continue
		default:
			failures++
			wait = m.backoff(failures)
			now := time.Now()
			if cur.live() && !now.Before(cur.expires) {
				m.log.Warn("the lease ran out unrenewed: closing the forwarded port", "port", cur.port, "err", err)
				if cerr := m.o.Host.Open(gen, policy.Forwarded{}); cerr != nil {
					m.log.Error("cannot close the forwarded port; the health check replaces the kill switch", "err", cerr)
				}
				cur = &lease{}
				m.announceLost(spec.Protocols)
			}
			if cur.live() {
				wait = min(wait, cur.expires.Sub(now))
			}
			state := StateNotAnswering
			if !isTimeout(err) {
				state = StateRequesting
			}
			if cur.live() {
				state = StateMapped // still live: the renewal is what failed
			}
			m.log.Warn("port forwarding request failed; retrying", "err", err, "retry in", wait.Round(time.Millisecond))
			m.update(func(s *Status) {
				s.State, s.Error = state, err.Error()
				if !cur.live() {
					s.Port, s.ExternalPort, s.Expires = 0, 0, time.Time{}
				}
			})
		}
	}
}

// round asks for every protocol's mapping, opens what was granted in the
// kill switch and hands the port on. again: ask once more at once (the
// gateway restarted in the middle of the round).
func (m *Manager) round(ctx context.Context, spec *config.PortForwardSpec, gen uint64, cur *lease) (next *lease, again bool, err error) {
	if !spec.Gateway.IsValid() {
		return nil, false, fmt.Errorf("no gateway: the server has no IPv4 DNS server; set portForwarding.natpmp.gateway")
	}
	g, done, err := m.o.Dial(ctx, spec.Gateway)
	if err != nil {
		return nil, false, fmt.Errorf("open gateway %s: %w", spec.Gateway, err)
	}
	defer done()
	next = &lease{ext: map[string]uint16{}, epoch: cur.epoch, epochAt: cur.epochAt}
	for i, proto := range spec.Protocols {
		internal, external := uint16(0), uint16(1) // proton: the gateway picks
		if spec.Style == config.PortForwardRFC {
			internal, external = spec.InternalPort, spec.InternalPort
			if e := cur.ext[proto]; e != 0 {
				external = e
			}
		}
		m.count(func(s *Status) { s.Requests++ })
		// A renewal never outlasts the lease: at its end the port closes.
		deadline := time.Now().Add(requestTimeout)
		if cur.live() && cur.expires.Before(deadline) {
			deadline = cur.expires
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		l, err := g.Map(rctx, proto, internal, external, spec.Lifetime)
		cancel()
		if err != nil {
			m.count(func(s *Status) { s.Failures++ })
			return nil, false, fmt.Errorf("map %s on gateway %s: %w", proto, spec.Gateway, err)
		}
		if l.External == 0 || l.Lifetime <= 0 {
			m.count(func(s *Status) { s.Failures++ })
			return nil, false, fmt.Errorf("map %s on gateway %s: granted port %d for %s", proto, spec.Gateway, l.External, l.Lifetime)
		}
		now := time.Now()
		if !next.epochAt.IsZero() && m.o.Restarted != nil && m.o.Restarted(next.epoch, next.epochAt, l.Epoch, now) {
			m.log.Warn("the gateway restarted (its epoch went back): its mappings are made again", "gateway", spec.Gateway)
			again = again || i > 0 // an earlier mapping of this round may be gone
		}
		next.epoch, next.epochAt = l.Epoch, now
		next.ext[proto] = l.External
		port := l.External // proton: the application listens on the port given
		if spec.Style == config.PortForwardRFC {
			port = spec.InternalPort
		}
		if exp := now.Add(l.Lifetime); next.expires.IsZero() || exp.Before(next.expires) {
			next.expires = exp
		}
		switch proto {
		case "tcp":
			next.fwd.TCP = []uint16{port}
		case "udp":
			next.fwd.UDP = []uint16{port}
		}
		if i == 0 {
			next.port, next.external = port, l.External
		} else if port != next.port {
			m.log.Warn("the gateway gave the protocols different ports; each is opened for its own", "first", next.port, proto, port)
		}
	}
	if !next.fwd.Equal(cur.fwd) {
		if err := m.o.Host.Open(gen, next.fwd); err != nil {
			return nil, false, fmt.Errorf("open the forwarded port in the kill switch: %w", err)
		}
		if cur.live() {
			m.log.Info("the gateway changed the forwarded port", "old", cur.port, "new", next.port)
		} else {
			m.log.Info("port forwarded", "port", next.port, "protocols", spec.Protocols, "gateway", spec.Gateway)
		}
	}
	changed := next.port != cur.port
	ext := uint16(0)
	if next.external != next.port {
		ext = next.external
	}
	m.update(func(s *Status) {
		s.State, s.Port, s.ExternalPort, s.Expires, s.Error = StateMapped, next.port, ext, next.expires.UTC().Truncate(time.Second), ""
		s.Protocols = slices.Clone(spec.Protocols)
	})
	m.push(pushJob{port: next.port, protocols: spec.Protocols, changed: changed})
	return next, again, nil
}

// renewal is when to renew: at half the lifetime asked for or the
// shortest granted, whichever is shorter (a gateway may grant more than
// asked: ProtonVPN's grants 60 s), at least a second from now.
func renewal(l *lease, asked time.Duration, now time.Time) time.Duration {
	return max(min(l.expires.Sub(now), asked)/2, time.Second)
}

func (m *Manager) backoff(failures int) time.Duration {
	d := m.o.Backoff
	for i := 1; i < failures && d < maxBackoff*m.o.Backoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff*m.o.Backoff)
}

// stop announces the port lost at shutdown.
func (m *Manager) stop(cur *lease, protocols []string) {
	if cur.live() {
		m.announceLost(protocols)
	}
	m.update(func(s *Status) { s.State, s.Port, s.ExternalPort, s.Expires = StateStopped, 0, 0, time.Time{} })
}

// announceLost tells the applications that the port is gone (only the
// command acts on it) and clears the published port.
func (m *Manager) announceLost(protocols []string) {
	m.update(func(s *Status) { s.State, s.Port, s.ExternalPort, s.Expires = StateLost, 0, 0, time.Time{} })
	m.push(pushJob{port: 0, protocols: protocols, changed: true})
}

// update changes the status and records it.
func (m *Manager) update(f func(*Status)) {
	m.mu.Lock()
	f(&m.st)
	s := m.st
	s.Protocols, s.Pending = slices.Clone(s.Protocols), slices.Clone(s.Pending)
	m.mu.Unlock()
	m.o.Host.Record(s)
}

// count changes counters without recording (the next update does).
func (m *Manager) count(f func(*Status)) {
	m.mu.Lock()
	f(&m.st)
	m.mu.Unlock()
}

// Status is the manager's current status.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.st
	s.Protocols, s.Pending = slices.Clone(s.Protocols), slices.Clone(s.Pending)
	return s
}

// isTimeout says the gateway did not answer (rather than refused).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &t) && t.Timeout())
}
