package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Provider is a running provider: its WireGuard device (if any) and
// servers.
type Provider struct {
	log     *eventLog
	wg      io.Closer
	natpmp  *Gateway
	closers []io.Closer
	serving sync.WaitGroup
}

// Start starts everything cfg describes in the calling thread's network
// namespace and logs EvReady. The servers' goroutines only use sockets
// opened here, so Start may run on a thread that leaves the namespace
// afterwards.
func Start(cfg *Config) (*Provider, error) {
	log, err := openLog(cfg.Log)
	if err != nil {
		return nil, err
	}
	p := &Provider{log: log}
	if err := p.start(cfg); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Provider) start(cfg *Config) (err error) {
	log := p.log
	if cfg.WireGuard != nil {
		if p.wg, err = startWireGuard(cfg.WireGuard, log); err != nil {
			return err
		}
	}
	if cfg.NATPMP != nil { // after the device: it listens on a tunnel address
		if p.natpmp, err = startNATPMP(cfg.NATPMP, log); err != nil {
			return err
		}
		p.closers = append(p.closers, p.natpmp)
	}
	zone, err := parseZone(cfg.Zone)
	if err != nil {
		return err
	}
	for _, a := range cfg.DNS {
		us, err := listenUDP(a)
		if err != nil {
			return fmt.Errorf("dns: %w", err)
		}
		for _, u := range us {
			p.serve(u, func() { serveDNSUDP(u, zone, log) })
		}
		l, err := listenTCP(a, cfg.ReusePort)
		if err != nil {
			return fmt.Errorf("dns tcp listen %s: %w", a, err)
		}
		p.serve(l, func() { serveDNSTCP(l, zone, log) })
	}
	for _, a := range cfg.TCPEcho {
		l, err := listenTCP(a, cfg.ReusePort)
		if err != nil {
			return fmt.Errorf("tcp echo listen %s: %w", a, err)
		}
		p.serve(l, func() { serveTCPEcho(l, log) })
	}
	for _, a := range cfg.UDPEcho {
		us, err := listenUDP(a)
		if err != nil {
			return fmt.Errorf("udp echo: %w", err)
		}
		for _, u := range us {
			p.serve(u, func() { serveUDPEcho(u, log) })
		}
	}
	for _, a := range cfg.HTTP {
		l, err := listenTCP(a, false)
		if err != nil {
			return fmt.Errorf("http listen %s: %w", a, err)
		}
		p.serve(l, func() { serveHTTP(l, cfg.Greeting, log) })
	}
	log.add(Event{Kind: EvReady})
	return nil
}

func (p *Provider) serve(c io.Closer, fn func()) {
	p.closers = append(p.closers, c)
	p.serving.Add(1)
	go func() { defer p.serving.Done(); fn() }()
}

// NATPMP is the NAT-PMP gateway's controls; nil without Config.NATPMP.
func (p *Provider) NATPMP() *Gateway { return p.natpmp }

// StopWireGuard takes the WireGuard device down, as a dead VPN server;
// the servers keep running.
func (p *Provider) StopWireGuard() {
	if p.wg != nil {
		p.wg.Close()
		p.wg = nil
	}
}

// Close stops the servers and the device and logs EvExit.
func (p *Provider) Close() error {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i].Close()
	}
	p.closers = nil
	p.serving.Wait()
	p.StopWireGuard()
	p.log.add(Event{Kind: EvExit})
	return p.log.w.Close()
}

// Run starts cfg in the current network namespace and serves until ctx is
// done.
func Run(ctx context.Context, cfg *Config) error {
	p, err := Start(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return p.Close()
}

// listenTCP listens on addr, with SO_REUSEPORT if reusePort.
func listenTCP(addr string, reusePort bool) (net.Listener, error) {
	var lc net.ListenConfig
	if reusePort {
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			})
			return errors.Join(err, serr)
		}
	}
	return lc.Listen(context.Background(), "tcp", addr)
}
