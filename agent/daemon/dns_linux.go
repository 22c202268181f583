package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/dnsproxy"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// dnsForwarder is a sidecar-mode agent's resolver for its pod: the pod
// has no /etc/netns files (the app's resolv.conf names
// names.SidecarDNS), so the agent serves DNS there (agent/dnsproxy): the
// cluster's domains go to the cluster resolver by the pod's interface,
// every other name to the active server's resolvers through the tunnel.
// A nil *dnsForwarder (host mode) does nothing.
type dnsForwarder struct {
	p        *dnsproxy.Proxy
	resolver atomic.Pointer[[]netip.Addr] // the active server's resolvers
}

// startDNS starts the forwarder of a sidecar-mode instance (nil, nil in
// host mode). It returns once it listens.
func startDNS(ctx context.Context, inst *engine.Instance, log *slog.Logger) (*dnsForwarder, error) {
	if inst.Mode() != engine.ModeSidecar {
		return nil, nil
	}
	f := &dnsForwarder{}
	f.follow(inst.Spec)
	cfg := dnsproxy.Config{Listen: names.SidecarDNS, Upstreams: f.upstreams, Logger: log.With("component", "dns")}
	if c := inst.Spec.Sidecar.ClusterDNS; c != nil {
		cfg.ClusterDomains, cfg.ClusterServer = c.Domains, netip.AddrPortFrom(c.Server, 53)
	}
	p, err := dnsproxy.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("dns forwarder: %w", err)
	}
	if err := p.Start(ctx); err != nil {
		return nil, &config.FieldError{Field: "sidecar", Msg: fmt.Sprintf("cannot serve DNS on %s in the pod: %v", names.SidecarDNS, err), Fix: "stop what listens on port 53 in the pod (the agent is its resolver)"}
	}
	f.p = p
	return f, nil
}

// follow makes s (the active server) the one whose resolvers answer.
func (f *dnsForwarder) follow(s *config.Spec) {
	if f == nil {
		return
	}
	if cur := f.resolver.Load(); cur != nil && slices.Equal(*cur, s.DNS) {
		return
	}
	dns := slices.Clone(s.DNS)
	f.resolver.Store(&dns)
}

// upstreams is read per query, from the forwarder's goroutines.
func (f *dnsForwarder) upstreams() []netip.Addr { return *f.resolver.Load() }

func (f *dnsForwarder) close() {
	if f != nil && f.p != nil {
		f.p.Close()
	}
}
