package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"

	"github.com/vpn-confinement/vpn-confinement/agent/atomicfile"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// forwarding runs the port-forwarding manager next to the daemon's loop.
// The manager's changes to the namespace (the kill switch's sets, the
// state file) go through pfHost, under the daemon's lock, so they never
// interleave with a repair, a reload or a failover.
type forwarding struct {
	o      portforward.Options
	m      *portforward.Manager
	host   *pfHost
	gen    uint64 // the generation the manager was last given
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// startForwarding starts the manager when the spec asks for port
// forwarding (nil otherwise). mu is the daemon's lock over inst.
func startForwarding(eng *engine.Engine, inst *engine.Instance, mu *sync.Mutex, mon *monitor, log *slog.Logger) (*forwarding, error) {
	f, err := newForwarding(eng, inst, inst.Spec, mu, mon, log)
	f.start(inst)
	return f, err
}

// newForwarding builds the manager of s's port forwarding (s is inst's
// spec, or the one a reload is about to give it), not started yet; nil
// when s asks for none.
func newForwarding(eng *engine.Engine, inst *engine.Instance, s *config.Spec, mu *sync.Mutex, mon *monitor, log *slog.Logger) (*forwarding, error) {
	spec := s.PortForward
	if spec == nil {
		return nil, nil
	}
	appList, onChange, err := pushers(s)
	if err != nil {
		return nil, err
	}
	host := &pfHost{eng: eng, inst: inst, mu: mu, mon: mon, log: log}
	o := portforward.Options{
		Spec: spec, Host: host, Apps: appList, OnChange: onChange, Log: log,
		Dial:      gatewayDialer(s.Name),
		Restarted: gatewayRestarted,
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &forwarding{o: o, host: host, ctx: ctx, cancel: cancel, done: make(chan struct{})}, nil
}

// start runs the manager, its leases of inst's current generation.
func (f *forwarding) start(inst *engine.Instance) {
	if f == nil {
		return
	}
	f.gen = inst.ForwardGen()
	f.o.Gen = f.gen
	f.m = portforward.New(f.o)
	go func() { defer close(f.done); f.m.Run(f.ctx) }()
}

// monitor hands the manager's status to mon from now on (a reload
// replaced the metrics); under the daemon's lock.
func (f *forwarding) monitor(mon *monitor) {
	if f != nil {
		f.host.mon = mon
	}
}

// sync tells the manager when the engine emptied the forwarded-port sets
// itself (a failover, a rebuild); call it under the lock after each event.
func (f *forwarding) sync(inst *engine.Instance) {
	if f == nil || f.m == nil || inst.ForwardGen() == f.gen {
		return
	}
	f.gen = inst.ForwardGen()
	f.m.Reset(f.gen, inst.Spec.PortForward)
}

// stop ends the manager (it announces the port lost) and waits for it;
// the caller must not hold the lock.
func (f *forwarding) stop() {
	if f == nil {
		return
	}
	f.cancel()
	if f.m != nil {
		<-f.done
	}
}

// pfHost is the manager's Host.
type pfHost struct {
	eng  *engine.Engine
	inst *engine.Instance
	mu   *sync.Mutex
	mon  *monitor
	log  *slog.Logger
}

func (h *pfHost) Open(gen uint64, f policy.Forwarded) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.eng.SetForwarded(h.inst, gen, f)
}

// Record writes the status into the state file (for status), the port
// into names.ForwardedPort (removed when there is none) and the metrics.
func (h *pfHost) Record(s portforward.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.eng.RecordPortForward(h.inst, &s); err != nil {
		h.log.Error("cannot record the port forwarding in the state file", "err", err)
	}
	if err := writeForwardedPort(h.inst.Spec.Name, s.Port); err != nil {
		h.log.Error("cannot update the forwarded port file", "err", err)
	}
	h.mon.portForwarded(s)
}

// writeForwardedPort writes the port and a newline, or removes the file.
func writeForwardedPort(ns string, port uint16) error {
	path := names.ForwardedPort(ns)
	if port == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(names.StateDir(ns), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", names.StateDir(ns), err)
	}
	return atomicfile.Write(path, []byte(strconv.Itoa(int(port))+"\n"), 0o644)
}
