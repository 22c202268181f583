package wireguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/sys/unix"
)

// Tunnel is a WireGuard interface living in the confined namespace.
type Tunnel interface {
	Backend() config.Backend
	Name() string
	// Done is closed when the data plane dies (userspace: the device
	// closed, e.g. because someone deleted the link). Nil for the kernel
	// backend, whose data plane needs no process.
	Done() <-chan struct{}
	// Destroy removes the interface and stops its data plane.
	Destroy() error
	// Stop stops the data plane before it returns (nothing can pass the
	// tunnel any more) and removes the interface, possibly in the
	// background: gone is closed once the interface no longer exists.
	Stop() (gone <-chan struct{}, err error)
}

// Stopped says the data plane of t (nil: none) has stopped: a userspace
// device closes itself when its link is deleted. A kernel tunnel's never
// does (its data plane needs no process).
func Stopped(t Tunnel) bool {
	if t == nil {
		return false
	}
	select {
	case <-t.Done():
		return true
	default:
		return false
	}
}

// Create makes the tunnel for s with backend b and moves it into the
// namespace nsName. The UDP socket stays in the calling (host) namespace.
// On error nothing is left behind.
func Create(ctx context.Context, log *slog.Logger, s *config.Spec, b config.Backend, nsName string) (Tunnel, error) {
	if !s.KeysLoaded {
		return nil, errors.New("wireguard: spec was resolved without keys (static validation only)")
	}
	cfg, err := DeviceConfig(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := RemoveStaleHostLink(s.Name, s.Interface); err != nil {
		return nil, err
	}
	if _, err := netlink.LinkByName(s.Interface); err == nil {
		return nil, fmt.Errorf("interface: %q already exists in the host namespace; remove it or set \"interface\" to a free name", s.Interface)
	}
	switch b {
	case config.BackendKernel:
		return createKernel(s, cfg, nsName)
	case config.BackendUserspace:
		return createUserspace(log, s, cfg, nsName)
	}
	return nil, fmt.Errorf("wireguard: backend %q cannot create a tunnel", b)
}

// RemoveStaleHostLink deletes a tunnel link left in the host namespace by
// an agent killed between creating the link and moving it. Only a link with
// the agent's own default name (vc-<namespace>) and a tunnel type is ours
// to delete; anything else under that name is left alone (Create then
// refuses with a clear error).
func RemoveStaleHostLink(nsName, iface string) error {
	if iface != names.Tunnel(nsName) {
		return nil
	}
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return nil
	}
	if t := l.Type(); t != "wireguard" && t != "tuntap" && t != "tun" {
		return nil
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("remove stale link %q from the host namespace: %w", iface, err)
	}
	return nil
}

// ProbeKernel reports whether the kernel can create WireGuard links. It
// tries in a throwaway namespace on a thread that dies afterwards, so the
// probe leaves nothing behind. nil means available.
func ProbeKernel() error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("probe kernel wireguard: unshare: %w", err)
			return
		}
		la := netlink.NewLinkAttrs()
		la.Name = "wgprobe"
		err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: la})
		switch {
		case err == nil:
			errc <- nil
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL):
			errc <- ErrNoKernel
		default:
			errc <- fmt.Errorf("probe kernel wireguard: %w", err)
		}
	}()
	return <-errc
}

// moveToNS moves a host-namespace link into the named namespace.
func moveToNS(link netlink.Link, nsName string) error {
	ns, err := netns.Open(nsName)
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := netlink.LinkSetNsFd(link, int(ns)); err != nil {
		return fmt.Errorf("move %q into netns %q: %w", link.Attrs().Name, nsName, err)
	}
	return nil
}
