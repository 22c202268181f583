package wireguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
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
