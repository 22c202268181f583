package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// eventLog appends one JSON line per event with a single write(2), so
// concurrent readers never see interleaved lines.
type eventLog struct {
	mu sync.Mutex
	f  *os.File
}

func openLog(path string) (*eventLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	return &eventLog{f: f}, nil
}

func (l *eventLog) add(e Event) {
	e.Time = time.Now()
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(b)
}

func (l *eventLog) errorf(format string, args ...any) {
	l.add(Event{Kind: EvError, Msg: fmt.Sprintf(format, args...)})
}

// Run starts everything cfg describes in the current network namespace,
// logs EvReady, and serves until ctx is done.
func Run(ctx context.Context, cfg *Config) error {
	log, err := openLog(cfg.Log)
	if err != nil {
		return err
	}
	defer log.f.Close()

	var closers []io.Closer
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].Close()
		}
	}()
	if cfg.WireGuard != nil {
		c, err := startWireGuard(cfg.WireGuard, log)
		if err != nil {
			return err
		}
		closers = append(closers, c)
	}
	zone, err := parseZone(cfg.Zone)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	serve := func(c io.Closer, fn func()) {
		closers = append(closers, c)
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	for _, a := range cfg.DNS {
		us, err := listenUDP(a)
		if err != nil {
			return fmt.Errorf("dns: %w", err)
		}
		for _, u := range us {
			serve(u, func() { serveDNSUDP(u, zone, log) })
		}
		l, err := listenTCP(a, cfg.ReusePort)
		if err != nil {
			return fmt.Errorf("dns tcp listen %s: %w", a, err)
		}
		serve(l, func() { serveDNSTCP(l, zone, log) })
	}
	for _, a := range cfg.TCPEcho {
		l, err := listenTCP(a, cfg.ReusePort)
		if err != nil {
			return fmt.Errorf("tcp echo listen %s: %w", a, err)
		}
		serve(l, func() { serveTCPEcho(l, log) })
	}
	for _, a := range cfg.UDPEcho {
		us, err := listenUDP(a)
		if err != nil {
			return fmt.Errorf("udp echo: %w", err)
		}
		for _, u := range us {
			serve(u, func() { serveUDPEcho(u, log) })
		}
	}
	log.add(Event{Kind: EvReady})
	<-ctx.Done()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i].Close()
	}
	closers = nil
	wg.Wait()
	log.add(Event{Kind: EvExit})
	return nil
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

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
