package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

const (
	// MaxInFlight bounds the queries being answered at once; a query
	// beyond it is answered SERVFAIL at once.
	MaxInFlight = 64
	// MaxTCPConns bounds the open TCP connections from clients; one beyond
	// it is closed.
	MaxTCPConns = 32
	// DefaultTimeout is Config.Timeout when it is zero.
	DefaultTimeout = 2 * time.Second
	// tcpIdle closes a client's TCP connection that sends no query this long.
	tcpIdle = 10 * time.Second
)

// Config is what the forwarder serves and where it sends queries.
type Config struct {
	Listen         string              // "127.0.0.1:53": an IP literal and a port (0: any free port, the same for UDP and TCP)
	ClusterDomains []string            // names at or under these go to ClusterServer
	ClusterServer  netip.AddrPort      // zero: no cluster DNS
	Upstreams      func() []netip.Addr // the active server's resolvers, read per query (follows failover); port 53
	Timeout        time.Duration       // per resolver and transport; zero: DefaultTimeout
	Logger         *slog.Logger        // nil: no logging

	// Dial opens the connections to the resolvers ("udp" or "tcp",
	// "addr:port"). Nil: a net.Dialer. Tests put fakes here.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Stats counts queries by what became of them. Each query counts once.
type Stats struct {
	Cluster  uint64 // forwarded to the cluster resolver
	Tunnel   uint64 // forwarded to the active server's resolvers
	Refused  uint64 // answered here with FORMERR, REFUSED or NOTIMP; forwarded nowhere
	Busy     uint64 // answered SERVFAIL because MaxInFlight were in flight, or a TCP connection beyond MaxTCPConns closed
	Dropped  uint64 // not a query (shorter than a header, or a response): no answer
	Failures uint64 // forwarded (also counted as Cluster or Tunnel), but no resolver answered: SERVFAIL
}

type counters struct {
	cluster, tunnel, refused, busy, dropped, failures atomic.Uint64
}

// Proxy is the forwarder. Its methods are safe for concurrent use.
type Proxy struct {
	listen   netip.AddrPort
	domains  []string // canonical: lower case, fully qualified
	cluster  netip.AddrPort
	upstream func() []netip.Addr
	timeout  time.Duration
	log      *slog.Logger
	dial     func(ctx context.Context, network, address string) (net.Conn, error)

	sem   chan struct{} // in-flight queries
	conns chan struct{} // open TCP connections
	stats counters

	mu      sync.Mutex
	started bool
	addr    netip.AddrPort
	cancel  context.CancelFunc
	udp     *net.UDPConn
	tcp     *net.TCPListener
	wg      sync.WaitGroup
}

// New checks cfg and returns a proxy that serves nothing until Start.
func New(cfg Config) (*Proxy, error) {
	listen, err := netip.ParseAddrPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("dnsproxy: listen address %q: want an IP address and a port, e.g. 127.0.0.1:53", cfg.Listen)
	}
	if cfg.Upstreams == nil {
		return nil, errors.New("dnsproxy: no Upstreams function")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("dnsproxy: negative timeout %v", cfg.Timeout)
	}
	p := &Proxy{
		listen:   listen,
		cluster:  cfg.ClusterServer,
		upstream: cfg.Upstreams,
		timeout:  cfg.Timeout,
		log:      cfg.Logger,
		dial:     cfg.Dial,
		sem:      make(chan struct{}, MaxInFlight),
		conns:    make(chan struct{}, MaxTCPConns),
	}
	if p.timeout == 0 {
		p.timeout = DefaultTimeout
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.dial == nil {
		var d net.Dialer
		p.dial = d.DialContext
	}
	for _, d := range cfg.ClusterDomains {
		c := dns.CanonicalName(d)
		if _, ok := dns.IsDomainName(c); !ok || c == "." {
			return nil, fmt.Errorf("dnsproxy: cluster domain %q is not a domain name below the root", d)
		}
		p.domains = append(p.domains, c)
	}
	switch {
	case cfg.ClusterServer == netip.AddrPort{}:
		if len(p.domains) > 0 {
			return nil, errors.New("dnsproxy: cluster domains without a cluster server")
		}
	case !cfg.ClusterServer.IsValid() || cfg.ClusterServer.Port() == 0:
		return nil, fmt.Errorf("dnsproxy: cluster server %v: want an address and a port", cfg.ClusterServer)
	case len(p.domains) == 0:
		return nil, errors.New("dnsproxy: a cluster server without cluster domains")
	}
	return p, nil
}

// Start binds UDP and TCP on the listen address and serves until ctx is
// done or Close is called. It returns once both are bound.
func (p *Proxy) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("dnsproxy: already started")
	}
	udp, tcp, err := bind(p.listen)
	if err != nil {
		return err
	}
	p.started = true
	p.udp, p.tcp = udp, tcp
	p.addr = udp.LocalAddr().(*net.UDPAddr).AddrPort()
	ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Add(3)
	go func() {
		defer p.wg.Done()
		<-ctx.Done()
		udp.Close()
		tcp.Close()
	}()
	go func() {
		defer p.wg.Done()
		p.serveUDP(ctx)
	}()
	go func() {
		defer p.wg.Done()
		p.serveTCP(ctx)
	}()
	p.log.Info("dns forwarder listening", "addr", p.addr.String(), "clusterDomains", len(p.domains))
	return nil
}

// bind opens UDP and TCP on the same address; with port 0, on the port
// the kernel chose for UDP (again with another port when TCP's is taken).
func bind(at netip.AddrPort) (*net.UDPConn, *net.TCPListener, error) {
	for try := 0; ; try++ {
		udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(at))
		if err != nil {
			return nil, nil, fmt.Errorf("dnsproxy: listen udp %v: %w", at, err)
		}
		port := udp.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		tcp, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(at.Addr(), port)))
		if err == nil {
			return udp, tcp, nil
		}
		udp.Close()
		if at.Port() != 0 || try == 10 {
			return nil, nil, fmt.Errorf("dnsproxy: listen tcp %v: %w", at, err)
		}
	}
}

// Addr is the bound address (UDP and TCP), once started.
func (p *Proxy) Addr() netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Close stops serving, cancels the queries in flight and waits for them.
// It may be called more than once, and before Start.
func (p *Proxy) Close() error {
	p.mu.Lock()
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
	return nil
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	s := &p.stats
	return Stats{
		Cluster:  s.cluster.Load(),
		Tunnel:   s.tunnel.Load(),
		Refused:  s.refused.Load(),
		Busy:     s.busy.Load(),
		Dropped:  s.dropped.Load(),
		Failures: s.failures.Load(),
	}
}

func (p *Proxy) serveUDP(ctx context.Context) {
	buf := make([]byte, dns.MaxMsgSize)
	for {
		n, from, err := p.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("dns forwarder: udp read failed; udp stops", "err", err)
			}
			return
		}
		query := append([]byte(nil), buf[:n]...)
		select {
		case p.sem <- struct{}{}:
		default:
			if resp := p.busy(query); resp != nil {
				p.udp.WriteToUDPAddrPort(resp, from)
			}
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.sem }()
			if resp := p.respond(ctx, query, false); resp != nil {
				p.udp.WriteToUDPAddrPort(resp, from)
			}
		}()
	}
}

func (p *Proxy) serveTCP(ctx context.Context) {
	for {
		c, err := p.tcp.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// e.g. EMFILE: wait instead of spinning.
			p.log.Warn("dns forwarder: tcp accept failed", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		select {
		case p.conns <- struct{}{}:
		default:
			p.stats.busy.Add(1)
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.conns }()
			p.serveConn(ctx, c)
		}()
	}
}

// serveConn answers one client's TCP queries in turn (RFC 7766 allows
// pipelining; this answers them in order, which clients accept).
func (p *Proxy) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	co := &dns.Conn{Conn: c}
	for {
		c.SetReadDeadline(time.Now().Add(tcpIdle))
		query, err := co.ReadMsgHeader(nil)
		if err != nil {
			return
		}
		var resp []byte
		select {
		case p.sem <- struct{}{}:
			resp = p.respond(ctx, query, true)
			<-p.sem
		default:
			resp = p.busy(query)
		}
		if resp == nil {
			continue
		}
		c.SetWriteDeadline(time.Now().Add(p.timeout))
		if _, err := co.Write(resp); err != nil {
			return
		}
	}
}

// busy answers a query SERVFAIL without forwarding it.
func (p *Proxy) busy(query []byte) []byte {
	req, whole, ok := p.parse(query)
	if !ok {
		return nil
	}
	p.stats.busy.Add(1)
	return reply(req, dns.RcodeServerFailure, whole)
}
