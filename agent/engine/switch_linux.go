package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"

	"github.com/vpn-confinement/vpn-confinement/agent/atomicfile"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Switching servers of a pool, retrying one, and putting back a device
// configuration someone changed behind the agent's back. The kill switch
// is replaced atomically by the next server's (one policy.Apply), never
// removed or opened: at every moment the namespace can reach only the
// tunnel, and only the resolvers of one of the two servers through it.

// devices reads and reconfigures the live WireGuard device.
type devices interface {
	// Config builds the device configuration of a server, resolving its
	// endpoint host names (in the host namespace).
	Config(ctx context.Context, s *config.Spec) (wgtypes.Config, error)
	// Configure applies cfg to the live tunnel t in namespace ns.
	Configure(t wireguard.Tunnel, ns string, cfg wgtypes.Config) error
	// Read returns the live device, without key material.
	Read(ns, iface string) (*wireguard.Device, error)
}

// resolvConf rewrites the namespace's resolv.conf in place.
type resolvConf interface {
	Rewrite(s *config.Spec) error
}

// ErrDataPlaneStopped: the tunnel's data plane has stopped (a userspace
// device closes when its link is deleted) and is not rebuilt yet.
var ErrDataPlaneStopped = errors.New("the tunnel's data plane has stopped (its link was deleted?); the repair rebuilds it first")

type wgDevices struct{}

func (wgDevices) Config(ctx context.Context, s *config.Spec) (wgtypes.Config, error) {
	return wireguard.DeviceConfig(ctx, s)
}
func (wgDevices) Configure(t wireguard.Tunnel, ns string, cfg wgtypes.Config) error {
	return wireguard.Configure(t, ns, cfg)
}
func (wgDevices) Read(ns, iface string) (*wireguard.Device, error) {
	return wireguard.ReadDevice(ns, iface)
}

type inPlaceResolv struct{}

func (inPlaceResolv) Rewrite(s *config.Spec) error { return rewriteResolvConf(s) }

// rewriteInPlace overwrites a file's content keeping its inode: a
// confined service started by systemd has our resolv.conf bind-mounted
// over its /etc/resolv.conf, and a bind mount pins the inode, so a
// rename would leave the service reading the old servers. The new
// content is written over the old, then the file is cut to its length:
// a reader never sees an empty file, at worst one torn between two
// versions for the instant of the write (both lists of servers the kill
// switch allowed at some point).
func rewriteInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return atomicfile.Write(path, data, 0o644)
	}
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	return f.Sync()
}

// live adapts a server's device configuration for a running tunnel: with
// no fixed listen port the current socket is kept (setting port 0 would
// rebind to another random port for nothing).
func live(cfg wgtypes.Config, s *config.Spec) wgtypes.Config {
	if s.ListenPort == 0 {
		cfg.ListenPort = nil
	}
	return cfg
}

// appliedOf is the configuration a tunnel was created with, if it says.
func appliedOf(t wireguard.Tunnel) *wgtypes.Config {
	if c, ok := wireguard.Applied(t); ok {
		return &c
	}
	return nil
}

// applied is the device configuration the instance's tunnel should have:
// what Ensure or the last Switch applied, or (a tunnel that does not say)
// computed once, resolving endpoint names, and kept.
func (e *Engine) applied(ctx context.Context, inst *Instance) (*wgtypes.Config, error) {
	if inst.applied != nil {
		return inst.applied, nil
	}
	cfg, err := e.sys().dev.Config(ctx, inst.Spec)
	if err != nil {
		return nil, err
	}
	inst.applied = &cfg
	return inst.applied, nil
}

// Switch makes next (a server of the instance's pool, or the active one
// again for a retry) the active server: its endpoint is resolved afresh,
// its kill switch replaces the current one atomically, the device gets
// its peers (and private key, if it differs; the peers are replaced, so
// even a retry of the same server starts a fresh handshake), the tunnel
// its addresses and routes, resolv.conf its DNS servers (in place) and
// the state file the active server. On error every step done is undone
// in reverse, back to the previous server, whose kill switch is put back
// the same way; nothing is ever removed.
func (e *Engine) Switch(ctx context.Context, inst *Instance, next *config.Spec) (err error) {
	old := inst.Spec
	if next.Name != old.Name || next.Interface != old.Interface {
		return fmt.Errorf("switch: server %d is for namespace %s/%s, not %s/%s", next.Server, next.Name, next.Interface, old.Name, old.Interface)
	}
	if inst.Tunnel == nil {
		return errors.New("switch: no tunnel")
	}
	if wireguard.Stopped(inst.Tunnel) {
		// A closed device takes no peers: nothing is changed, and the
		// daemon's repair rebuilds the tunnel (the active server's fresh
		// start) before any switch.
		return fmt.Errorf("switch to server %d: %w", next.Server, ErrDataPlaneStopped)
	}
	sys := e.sys()
	log := e.log().With("namespace", old.Name)
	// A warm switch (next is the standby on the device) moves the allowed
	// IPs between the two peers; a cold one replaces the peers.
	warm := inst.standby != nil && inst.standby.spec == next && StandbyCompatible(old, next) == nil &&
		inst.applied != nil && len(inst.applied.Peers) == 1
	var cfg wgtypes.Config
	var devStep, devUndo wgtypes.Config
	if !warm {
		// Resolve first: a name that does not resolve changes nothing.
		if cfg, err = sys.dev.Config(ctx, next); err != nil {
			return fmt.Errorf("switch to server %d: %w", next.Server, err)
		}
		devStep = live(cfg, next)
	}
	prev, perr := e.applied(ctx, inst)
	if warm {
		// The standby's endpoint as its handshakes proved it: not
		// resolved again.
		cfg = *prev
		cfg.Peers = []wgtypes.PeerConfig{wireguard.PeerConfig(next.Peers[0], inst.standby.peer.Endpoint)}
		devStep = warmMove(prev.Peers[0], cfg.Peers[0])
		devUndo = warmMove(cfg.Peers[0], prev.Peers[0])
	}
	standbyBefore := inst.standby
	j := &journal{log: log}
	policySwitched := false
	defer func() {
		if err == nil {
			return
		}
		// The previous server's kill switch goes back first (atomically,
		// like every replace), so that resolv.conf never names resolvers
		// the loaded kill switch does not allow; then the rest, in
		// reverse.
		var rerrs []error
		if policySwitched {
			rerrs = append(rerrs, wrap("undo policy", applyPolicy(sys.fw, inst.variant(), old, inst.forwarded, false)))
		}
		rerrs = append(rerrs, j.rollback())
		if warm {
			inst.standby = standbyBefore
		}
		if rerr := errors.Join(rerrs...); rerr != nil {
			err = fmt.Errorf("%w (rollback: %v)", err, rerr)
		}
		if wireguard.Stopped(inst.Tunnel) && !errors.Is(err, ErrDataPlaneStopped) {
			// The link was deleted during the switch: the device closed
			// under it. The failure is the tunnel's, not the server's.
			err = fmt.Errorf("%w: %w", ErrDataPlaneStopped, err)
		}
	}()

	// The previous server's forwarded port goes with its kill switch, in
	// the same replace: the new server's public address has no lease yet
	// (the daemon asks its gateway once the switch is done).
	if err := applyPolicy(sys.fw, inst.variant(), next, policy.Forwarded{}, false); err != nil {
		return fmt.Errorf("switch to server %d: kill switch: %w", next.Server, err)
	}
	policySwitched = true

	// The pin lets the socket reach the next server's endpoints before the
	// device is given them (netlink cannot batch nftables with the
	// device's configuration, nor the host's table with the namespace's),
	// and only them once it has them, below.
	pinnedBefore, err := e.widenPin(inst, cfg)
	if err != nil {
		return fmt.Errorf("switch to server %d: %w", next.Server, err)
	}
	j.add(StepTunnel, func() error { return e.repin(inst, pinnedBefore) })

	if err := sys.dev.Configure(inst.Tunnel, next.Name, devStep); err != nil {
		return fmt.Errorf("switch to server %d: %w", next.Server, err)
	}
	j.add(StepTunnel, func() error {
		if warm {
			return sys.dev.Configure(inst.Tunnel, old.Name, devUndo)
		}
		// The peers were replaced: the standby's went too.
		inst.standby = nil
		if perr != nil {
			return fmt.Errorf("previous device configuration unknown: %w", perr)
		}
		return sys.dev.Configure(inst.Tunnel, old.Name, live(*prev, old))
	})
	if !warm {
		inst.standby = nil
	}

	v := inst.variant()
	if err := v.routes(sys, next); err != nil {
		return fmt.Errorf("switch to server %d: %w", next.Server, err)
	}
	j.add(StepAddresses, func() error { return v.routes(sys, old) })

	if err := v.rewriteResolver(next, sys.resolv.Rewrite); err != nil {
		return fmt.Errorf("switch to server %d: resolv.conf: %w", next.Server, err)
	}
	j.add(StepResolver, func() error { return v.rewriteResolver(old, sys.resolv.Rewrite) })

	st := inst.stateFor(next)
	if err := sys.files.WriteState(st); err != nil {
		return fmt.Errorf("switch to server %d: %w", next.Server, err)
	}
	inst.Spec, inst.applied, inst.state, inst.forwarded = next, &cfg, st, policy.Forwarded{}
	inst.forwardGen++
	e.narrowPin(inst, endpointsOf(&cfg))
	if warm {
		// The server left is the standby now, on its old session until
		// the daemon re-arms it (or another server replaces it).
		inst.standby = &standby{spec: old, peer: standbyPeer(prev.Peers[0])}
	}
	log.Info("switched server", "server", next.Server, "config", next.ConfigFile(), "endpoint", endpointOf(next), "warm", warm)
	return nil
}

// RepairDrift compares d, the live device as the caller just read it
// (Device; the watchdog's one reading of its check), with the configuration the
// agent applied and, when they differ (someone changed an endpoint, a
// peer or the key through the UAPI socket or netlink), applies it again.
// It returns what differed.
func (e *Engine) RepairDrift(ctx context.Context, inst *Instance, d *wireguard.Device) ([]string, error) {
	if inst.Tunnel == nil || wireguard.Stopped(inst.Tunnel) {
		return nil, nil // a stopped data plane is the repair's: it rebuilds the tunnel
	}
	applied, err := e.applied(ctx, inst)
	if err != nil {
		return nil, err
	}
	if k := (wantKey{applied, inst.standby}); inst.want == nil || inst.wantOf != k {
		// once per configuration applied (the standby's peer included)
		inst.want, inst.wantOf = wireguard.NewWant(inst.wantConfig(applied)), k
	}
	drift := inst.want.Drift(d)
	if len(drift) == 0 {
		return nil, nil
	}
	return drift, e.sys().dev.Configure(inst.Tunnel, inst.Spec.Name, live(*inst.want.Config(), inst.Spec))
}

// Server is what the engine knows about the active server, for status
// and metrics: no key material.
type Server struct {
	Index      int
	ConfigFile string
	Endpoint   string // as configured (host:port)
	Resolved   string // the address the endpoint resolved to, if known
}

// ActiveServer describes the instance's active server.
func (inst *Instance) ActiveServer() Server {
	s := Server{Index: inst.Spec.Server, ConfigFile: inst.Spec.ConfigFile(), Endpoint: endpointOf(inst.Spec)}
	if inst.applied != nil && len(inst.applied.Peers) > 0 && inst.applied.Peers[0].Endpoint != nil {
		s.Resolved = inst.applied.Peers[0].Endpoint.String()
	}
	return s
}

// selfReading is a tunnel that reads its own device in process (the
// userspace backend's: no wgctrl, no UAPI socket).
type selfReading interface {
	Device() (*wireguard.Device, error)
}

// Device reads the live device of the instance (no key material): the
// tunnel itself when it can, else through wgctrl (sys.dev).
func (e *Engine) Device(inst *Instance) (*wireguard.Device, error) {
	if t, ok := inst.Tunnel.(selfReading); ok {
		return t.Device()
	}
	return e.sys().dev.Read(inst.Spec.Name, inst.Spec.Interface)
}

func endpointOf(s *config.Spec) string {
	if len(s.Peers) == 0 {
		return ""
	}
	return s.Peers[0].Endpoint
}

// RecordPortForward writes the daemon's port forwarding into the state
// file, for status. Unchanged: no write.
func (e *Engine) RecordPortForward(inst *Instance, p *portforward.Status) error {
	if inst.state != nil && reflect.DeepEqual(inst.state.PortForward, p) {
		return nil
	}
	st := inst.stateFor(inst.Spec)
	st.PortForward = p
	if err := e.sys().files.WriteState(st); err != nil {
		return err
	}
	inst.state = st
	return nil
}

// RecordLiveness writes the daemon's view of the tunnel (alive, idle,
// failing over...) into the state file, for status. Unchanged: no write.
func (e *Engine) RecordLiveness(inst *Instance, l *Liveness) error {
	st := inst.stateFor(inst.Spec)
	if inst.state != nil && inst.state.Liveness != nil && l != nil && *inst.state.Liveness == *l {
		return nil
	}
	st.Liveness = l
	if err := e.sys().files.WriteState(st); err != nil {
		return err
	}
	inst.state = st
	return nil
}
