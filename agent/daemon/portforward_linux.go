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
	m      *portforward.Manager
	gen    uint64 // the generation the manager was last given
	cancel context.CancelFunc
	done   chan struct{}
}

// startForwarding starts the manager when the spec asks for port
// forwarding (nil otherwise). mu is the daemon's lock over inst.
func startForwarding(eng *engine.Engine, inst *engine.Instance, mu *sync.Mutex, mon *monitor, log *slog.Logger) (*forwarding, error) {
	spec := inst.Spec.PortForward
	if spec == nil {
		return nil, nil
	}
	appList, onChange, err := pushers(inst.Spec)
	if err != nil {
		return nil, err
	}
	host := &pfHost{eng: eng, inst: inst, mu: mu, mon: mon, log: log}
	m := portforward.New(portforward.Options{
		Spec: spec, Host: host, Apps: appList, OnChange: onChange, Log: log,
		Dial:      gatewayDialer(inst.Spec.Name),
		Restarted: gatewayRestarted,
	})
	ctx, cancel := context.WithCancel(context.Background())
	f := &forwarding{m: m, gen: inst.ForwardGen(), cancel: cancel, done: make(chan struct{})}
	go func() { defer close(f.done); m.Run(ctx) }()
	return f, nil
}

// sync tells the manager when the engine emptied the forwarded-port sets
// itself (a failover, a rebuild); call it under the lock after each event.
func (f *forwarding) sync(inst *engine.Instance) {
	if f == nil || inst.ForwardGen() == f.gen {
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
	<-f.done
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
