package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/atomicfile"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// Where the engine meets the kernel and the file system: each interface
// is the engine's whole use of one part of it, so that the journal, Up's
// rollback and the repairs can be tested with fakes, without root.

// namespaces creates and removes named network namespaces.
type namespaces interface {
	Exists(name string) bool
	Create(name string) error
	Delete(name string) error
}

// firewall loads and removes nftables tables (family inet) in the
// namespace bind-mounted at nsPath ("": the host's).
type firewall interface {
	// Create loads a table that must not exist yet: unix.EEXIST if it does.
	Create(r *policy.Ruleset, nsPath string) error
	// Apply replaces the table atomically (or creates it).
	Apply(r *policy.Ruleset, nsPath string) error
	// Remove deletes the table; a missing one is not an error.
	Remove(nsPath, table string) error
	// SetForwarded makes the table's forwarded-port sets hold f, adding
	// and removing elements in one batch (never a replace).
	SetForwarded(nsPath, table string, f policy.Forwarded) error
	// SetPinned makes the pin table (in the agent's own namespace) allow
	// exactly eps, in one batch (never a replace).
	SetPinned(table string, eps []netip.AddrPort) error
}

// links configures the links that carry traffic: the tunnel's addresses
// and routes, and the veth pair of a host link.
type links interface {
	// ConfigureTunnel sets the tunnel's MTU and addresses, brings it up
	// and points the default routes at it: from here it carries traffic.
	ConfigureTunnel(s *config.Spec) error
	// ConfigureSidecar is ConfigureTunnel in sidecar mode: the tunnel's
	// MTU and addresses, its default routes in names.SidecarTable and the
	// two policy rules, converging over the ones it finds; the namespace's
	// own routes are left as they are.
	ConfigureSidecar(s *config.Spec) error
	// RemoveSidecarRoutes removes the rules and the table routes
	// ConfigureSidecar makes, in the namespace name (missing is fine).
	RemoveSidecarRoutes(name string) error
	// PodInterfaces lists the links of s's namespace but lo and the
	// tunnel: the pod's own interfaces.
	PodInterfaces(s *config.Spec) ([]string, error)
	// CreateHostLink makes the host link and returns its undo; on error
	// it has undone its own work.
	CreateHostLink(s *config.Spec) (undo func() error, err error)
	// DeleteHostLink removes the host end of a veth; missing is fine.
	DeleteHostLink(hostIf string) error
	// HostLinkAlias says whether link name exists in the host's
	// namespace, and its alias (names.LinkAlias marks the agent's).
	HostLinkAlias(name string) (exists bool, alias string)
	// EnableForwarding turns the host's net.ipv4.ip_forward on for the
	// port mappings of namespace ns; ReleaseForwarding restores its
	// previous value when ns was its last user (forward_linux.go).
	EnableForwarding(ns string) error
	ReleaseForwarding(ns string) error
}

// tunnels creates and removes WireGuard links.
type tunnels interface {
	// Ensure creates the tunnel of s in its namespace, or adopts a kernel
	// link an earlier agent left there.
	Ensure(ctx context.Context, s *config.Spec, backend config.Backend, log *slog.Logger) (wireguard.Tunnel, error)
	// Reconfigure replaces the key and peers of t, the running tunnel,
	// with s's (a userspace tunnel records the new key). It resolves
	// endpoint names before it changes anything.
	Reconfigure(ctx context.Context, t wireguard.Tunnel, s *config.Spec) error
	// Destroy removes the tunnel link iface in namespace ns by name.
	Destroy(ns, iface string) error
	// RemoveStaleHostLink removes a link named iface left in the host's
	// namespace (a crash between creating it and moving it in).
	RemoveStaleHostLink(ns, iface string) error
}

// files writes and removes what the engine keeps on disk for a namespace.
type files interface {
	// WriteResolver writes the resolver files; created says it made their
	// directory (so a rollback removes only what it made).
	WriteResolver(s *config.Spec) (created bool, err error)
	RemoveResolver(name string) error
	// RewriteResolvConf rewrites resolv.conf in place (the same inode:
	// a bind mount of it sees the new content).
	RewriteResolvConf(s *config.Spec) error
	WriteState(st *State) error
	RemoveState(name string) error
	// RemoveUAPISocket removes a userspace tunnel's control socket.
	RemoveUAPISocket(iface string) error
	// RemoveStateDir removes the namespace's runtime directory and all in
	// it, the owner mark too.
	RemoveStateDir(name string) error
	// Owned says the namespace's owner mark exists; WriteOwner writes it
	// (before anything of the namespace is made), RemoveOwner removes it
	// (a failed first up) and the runtime directory if that leaves it empty.
	Owned(name string) bool
	WriteOwner(name string) error
	RemoveOwner(name string) error
}

// system is everything the engine changes outside its own memory. A zero
// field means the real implementation.
type system struct {
	ns      namespaces
	fw      firewall
	links   links
	tunnels tunnels
	files   files
	dev     devices    // switch_linux.go
	resolv  resolvConf // switch_linux.go
	lock    func(name string) (*Lock, error)
	// agent identifies this process's sockets (sidecar mode's kill switch).
	agent func() (policy.AgentSocket, error)
}

// sys returns the engine's system with the real implementations filled in
// (a copy: an Engine may be shared).
func (e *Engine) sys() system {
	d := e.system
	d.ns = cmp.Or[namespaces](d.ns, realNamespaces{})
	d.fw = cmp.Or[firewall](d.fw, nftFirewall{})
	d.links = cmp.Or[links](d.links, netlinkLinks{})
	d.tunnels = cmp.Or[tunnels](d.tunnels, wgTunnels{})
	d.files = cmp.Or[files](d.files, runtimeFiles{})
	d.dev = cmp.Or[devices](d.dev, wgDevices{})
	d.resolv = cmp.Or[resolvConf](d.resolv, inPlaceResolv{})
	if d.lock == nil {
		d.lock = TryLock
	}
	if d.agent == nil {
		d.agent = policy.SelfAgentSocket
	}
	return d
}

type realNamespaces struct{}

func (realNamespaces) Exists(name string) bool  { return netns.Exists(name) }
func (realNamespaces) Delete(name string) error { return netns.Delete(name) }

// Create makes the namespace with unprivileged ping allowed (allowPing).
func (realNamespaces) Create(name string) error {
	if err := netns.Create(name); err != nil {
		return err
	}
	if err := netns.Do(name, allowPing); err != nil {
		netns.Delete(name)
		return err
	}
	return nil
}

// allowPing lets every group of the calling thread's network namespace
// open unprivileged ICMP echo sockets (socket(AF_INET, SOCK_DGRAM,
// IPPROTO_ICMP)), as systemd sets it on the host: a new namespace starts
// with "1 0", none. ping needs no capability then (exec --user, a
// confined service); what it sends is judged by the kill switch like any
// other packet.
func allowPing() error {
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647\n"), 0o644); err != nil {
		return fmt.Errorf("allow unprivileged ping: %w", err)
	}
	return nil
}

type nftFirewall struct{}

func (nftFirewall) Create(r *policy.Ruleset, nsPath string) error { return policy.Create(r, nsPath) }
func (nftFirewall) Apply(r *policy.Ruleset, nsPath string) error  { return policy.Apply(r, nsPath) }
func (nftFirewall) Remove(nsPath, table string) error             { return policy.Remove(nsPath, table) }
func (nftFirewall) SetForwarded(nsPath, table string, f policy.Forwarded) error {
	return policy.SetForwarded(nsPath, table, f)
}
func (nftFirewall) SetPinned(table string, eps []netip.AddrPort) error {
	return policy.SetPinned(table, eps)
}

type netlinkLinks struct{}

func (netlinkLinks) ConfigureTunnel(s *config.Spec) error  { return configureTunnelL3(s) }
func (netlinkLinks) ConfigureSidecar(s *config.Spec) error { return configureSidecarL3(s) }
func (netlinkLinks) RemoveSidecarRoutes(name string) error { return removeSidecarRouting(name) }
func (netlinkLinks) PodInterfaces(s *config.Spec) ([]string, error) {
	return podInterfaces(s)
}
func (netlinkLinks) CreateHostLink(s *config.Spec) (func() error, error) {
	return createHostLink(s)
}
func (netlinkLinks) DeleteHostLink(hostIf string) error { return deleteHostLink(hostIf) }
func (netlinkLinks) EnableForwarding(ns string) error {
	f, err := hostForwarding()
	if err != nil {
		return err
	}
	return f.acquire(ns)
}
func (netlinkLinks) ReleaseForwarding(ns string) error {
	f, err := hostForwarding()
	if err != nil {
		return err
	}
	return f.release(ns)
}
func (netlinkLinks) HostLinkAlias(name string) (bool, string) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return false, ""
	}
	return true, l.Attrs().Alias
}

type wgTunnels struct{}

func (wgTunnels) Ensure(ctx context.Context, s *config.Spec, backend config.Backend, log *slog.Logger) (wireguard.Tunnel, error) {
	h, err := netns.Handle(s.Name)
	if err != nil {
		return nil, err
	}
	existing, lerr := h.LinkByName(s.Interface)
	h.Close()
	if lerr == nil {
		if backend == config.BackendKernel && existing.Type() == "wireguard" {
			cfg, err := wireguard.DeviceConfig(ctx, s)
			if err != nil {
				return nil, err
			}
			if err := wireguard.Reconfigure(s.Name, s.Interface, cfg); err != nil {
				return nil, err
			}
			log.Info("adopted existing kernel WireGuard link", "interface", s.Interface)
			return wireguard.AdoptKernelConfigured(s.Name, s.Interface, cfg), nil
		}
		// Anything else under our name is stale: replace it.
		if err := wireguard.AdoptKernel(s.Name, s.Interface).Destroy(); err != nil {
			return nil, err
		}
	}
	return wireguard.Create(ctx, log, s, backend, s.Name)
}

func (wgTunnels) Reconfigure(ctx context.Context, t wireguard.Tunnel, s *config.Spec) error {
	return wireguard.Reload(ctx, t, s)
}

func (wgTunnels) Destroy(ns, iface string) error { return wireguard.AdoptKernel(ns, iface).Destroy() }
func (wgTunnels) RemoveStaleHostLink(ns, iface string) error {
	return wireguard.RemoveStaleHostLink(ns, iface)
}

type runtimeFiles struct{}

func (runtimeFiles) WriteResolver(s *config.Spec) (bool, error) { return writeResolver(s) }
func (runtimeFiles) RemoveResolver(name string) error           { return removeResolver(name) }
func (runtimeFiles) RewriteResolvConf(s *config.Spec) error     { return rewriteResolvConf(s) }
func (runtimeFiles) WriteState(st *State) error                 { return writeState(st) }
func (runtimeFiles) RemoveState(name string) error              { return removeState(name) }
func (runtimeFiles) RemoveUAPISocket(iface string) error {
	if err := os.Remove(names.UAPISocket(iface)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
func (runtimeFiles) RemoveStateDir(name string) error { return os.RemoveAll(names.StateDir(name)) }
func (runtimeFiles) Owned(name string) bool {
	_, err := os.Lstat(names.OwnerFile(name))
	return err == nil
}
func (runtimeFiles) WriteOwner(name string) error {
	if err := os.MkdirAll(names.StateDir(name), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", names.StateDir(name), err)
	}
	return atomicfile.Write(names.OwnerFile(name), []byte("vpn-agent made namespace "+name+"\n"), 0o644)
}
func (runtimeFiles) RemoveOwner(name string) error {
	if err := os.Remove(names.OwnerFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	os.Remove(names.StateDir(name)) // only if empty
	return nil
}
