package provider

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// NATPMP configures the provider's NAT-PMP gateway (RFC 6886), the port
// forwarding of a VPN provider: each live mapping is a DNAT of
// Public:external to the requesting client's address in the provider's
// namespace. Its encoding is written from the RFC independently of
// agent/natpmp, and checked against the natpmpc client.
type NATPMP struct {
	// Listen is the UDP address requests come to: the provider's tunnel
	// address, port 5351 ("198.19.66.1:5351"). Answers come from it.
	Listen string `json:"listen"`
	// Public is the external IPv4 address the gateway reports and
	// forwards from (the provider's "internet" address).
	Public string `json:"public"`
	// Style is StyleProton (the gateway picks the external port from
	// Ports, whatever was asked, and maps public:P to client:P) or
	// StyleRFC (the suggested external port if it is free, otherwise one
	// from Ports, mapped to the requested internal port).
	Style string `json:"style"`
	// Ports are the external ports the gateway assigns, tried in turn
	// (skipping those in use); empty: 40000 to 40999.
	Ports []int `json:"ports,omitempty"`
	// Lifetime is the lease in seconds: StyleProton grants it whatever
	// was asked (ProtonVPN grants 60), StyleRFC grants at most it.
	// Default 60.
	Lifetime int `json:"lifetime,omitempty"`
	// Epoch is the seconds since start of epoch at start, as of a gateway
	// that has been up for a while (a client can only see a restart once
	// the epoch it knew is over 2 s). Restart counts from 0.
	Epoch uint32 `json:"epoch,omitempty"`
	// Control, if set, is a unix socket path serving the gateway's
	// runtime controls (ChangePort, Down, Up, Restart, Mappings) to
	// another process: DialNATPMP.
	Control string `json:"control,omitempty"`
}

// NAT-PMP gateway styles.
const (
	StyleProton = "proton"
	StyleRFC    = "rfc"
)

// Mapping is one live lease.
type Mapping struct {
	Client       netip.Addr `json:"client"`
	Protocol     string     `json:"protocol"`     // "udp" or "tcp"
	InternalPort uint16     `json:"internalPort"` // as requested (0 from ProtonVPN's clients)
	ExternalPort uint16     `json:"externalPort"`
	// TargetPort is where Public:ExternalPort goes on Client: the
	// internal port, or the external one when the internal port is 0.
	TargetPort uint16    `json:"targetPort"`
	Expires    time.Time `json:"expires"`
}

// natRules installs a gateway's DNATs (replacing all earlier ones).
type natRules interface {
	apply(public netip.Addr, ms []Mapping) error
}

type leaseKey struct {
	client   netip.Addr
	proto    uint8
	internal uint16
}

// Gateway is a running NAT-PMP gateway.
type Gateway struct {
	public   netip.Addr
	style    string
	ports    []uint16
	lifetime uint32
	nat      natRules
	log      *eventLog

	mu         sync.Mutex
	epochBase  uint32
	epochStart time.Time
	down       bool
	next       int // index into ports
	leases     map[leaseKey]*Mapping
	timer      *time.Timer
	closed     bool

	closers []io.Closer // socket, control listener, namespace handle
}

func newGateway(c *NATPMP, nat natRules, log *eventLog) (*Gateway, error) {
	pub, err := netip.ParseAddr(c.Public)
	if err != nil || !pub.Is4() {
		return nil, fmt.Errorf("natpmp: public %q is no IPv4 address", c.Public)
	}
	if c.Style != StyleProton && c.Style != StyleRFC {
		return nil, fmt.Errorf("natpmp: style %q: want %q or %q", c.Style, StyleProton, StyleRFC)
	}
	g := &Gateway{public: pub, style: c.Style, lifetime: 60, nat: nat, log: log,
		epochBase: c.Epoch, epochStart: time.Now(), leases: map[leaseKey]*Mapping{}}
	if c.Lifetime > 0 {
		g.lifetime = uint32(c.Lifetime)
	}
	for _, p := range c.Ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("natpmp: port %d out of range", p)
		}
		g.ports = append(g.ports, uint16(p))
	}
	if len(g.ports) == 0 {
		for p := 40000; p < 41000; p++ {
			g.ports = append(g.ports, uint16(p))
		}
	}
	return g, nil
}

// protoName and protoOp convert between mapping opcodes (1 UDP, 2 TCP)
// and protocol names.
func protoName(op uint8) string {
	if op == 1 {
		return "udp"
	}
	return "tcp"
}

func protoOp(name string) uint8 {
	if name == "udp" {
		return 1
	}
	return 2
}

// epoch is the seconds since start of epoch; g.mu held.
func (g *Gateway) epoch(now time.Time) uint32 {
	return g.epochBase + uint32(now.Sub(g.epochStart)/time.Second)
}

// applyLocked drops expired leases, installs the DNATs of the others
// and arms the timer for the next expiry; g.mu held.
func (g *Gateway) applyLocked(now time.Time) error {
	var next time.Time
	for k, m := range g.leases {
		if !now.Before(m.Expires) {
			delete(g.leases, k)
			g.log.add(Event{Kind: EvNATPMP, Net: m.Protocol, Src: m.Client.String(),
				Dst: netip.AddrPortFrom(g.public, m.ExternalPort).String(), Msg: "expired"})
			continue
		}
		if next.IsZero() || m.Expires.Before(next) {
			next = m.Expires
		}
	}
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	if !next.IsZero() {
		g.timer = time.AfterFunc(next.Sub(now), g.expire)
	}
	if err := g.nat.apply(g.public, g.sorted()); err != nil {
		g.log.errorf("natpmp: %v", err)
		return err
	}
	return nil
}

func (g *Gateway) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.applyLocked(time.Now())
	}
}

func (g *Gateway) sorted() []Mapping {
	out := make([]Mapping, 0, len(g.leases))
	for _, m := range g.leases {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Mapping) int {
		return cmp.Or(a.Client.Compare(b.Client), strings.Compare(a.Protocol, b.Protocol), cmp.Compare(a.InternalPort, b.InternalPort))
	})
	return out
}

// Mappings returns the live leases, ordered by client, protocol and
// internal port.
func (g *Gateway) Mappings() ([]Mapping, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sorted(), nil
}

// ChangePort moves every live lease to another external port at once, as
// a provider that reassigned its ports: the old DNATs go, new ones come,
// and the next answer for each mapping reports its new port (a client
// holding both protocols keeps one port for both under StyleProton).
func (g *Gateway) ChangePort() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.sorted() {
		k := leaseKey{m.Client, protoOp(m.Protocol), m.InternalPort}
		l := g.leases[k]
		old := l.ExternalPort
		l.ExternalPort = 0
		ext := g.allocate(k, 0, old)
		if ext == 0 {
			l.ExternalPort = old
			return fmt.Errorf("natpmp change port: no free port for %s %s", m.Protocol, m.Client)
		}
		l.ExternalPort = ext
		if m.InternalPort == 0 {
			l.TargetPort = ext
		}
		g.log.add(Event{Kind: EvNATPMP, Net: m.Protocol, Src: m.Client.String(), Dst: netip.AddrPortFrom(g.public, ext).String(),
			Msg: fmt.Sprintf("moved from %d", old)})
	}
	return g.applyLocked(time.Now())
}

// Down stops answering (requests are read and dropped, as by a gateway
// that hung). Existing DNATs stay until their leases run out.
func (g *Gateway) Down() error { return g.setDown(true) }

// Up answers again after Down.
func (g *Gateway) Up() error { return g.setDown(false) }

func (g *Gateway) setDown(down bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = down
	msg := "up"
	if down {
		msg = "down"
	}
	g.log.add(Event{Kind: EvNATPMP, Msg: msg})
	return nil
}

// Restart forgets every lease and removes its DNAT; the epoch starts
// again from 0 (RFC 6886 3.6). It also undoes Down.
func (g *Gateway) Restart() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	g.leases = map[leaseKey]*Mapping{}
	g.epochBase, g.epochStart, g.down = 0, now, false
	g.log.add(Event{Kind: EvNATPMP, Msg: "restart"})
	return g.applyLocked(now)
}
