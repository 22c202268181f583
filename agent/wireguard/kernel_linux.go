package wireguard

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

type kernelTunnel struct {
	name, ns string
	applied  *wgtypes.Config // the configuration Create or Reconfigure applied
}

func createKernel(s *config.Spec, cfg wgtypes.Config, nsName string) (Tunnel, error) {
	la := netlink.NewLinkAttrs()
	la.Name = s.Interface
	la.MTU = s.MTU
	link := &netlink.Wireguard{LinkAttrs: la}
	if err := netlink.LinkAdd(link); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, ErrNoKernel
		}
		return nil, fmt.Errorf("create wireguard link %q: %w", s.Interface, err)
	}
	ok := false
	defer func() {
		if !ok {
			netlink.LinkDel(link)
		}
	}()
	// Marked as the agent's at once (the kernel ignores an alias given at
	// creation): should a crash leave it in the host namespace, down
	// removes it, and nothing unmarked.
	if err := netlink.LinkSetAlias(link, names.LinkAlias(nsName)); err != nil {
		return nil, fmt.Errorf("mark wireguard link %q: %w", s.Interface, err)
	}
	// Configure while the link is still in the host namespace: the kernel
	// binds the UDP socket in the namespace the link was created in, and
	// it stays there after the move (the birthplace trick).
	if err := configureHere(s.Interface, cfg); err != nil {
		return nil, err
	}
	if err := moveToNS(link, nsName); err != nil {
		return nil, err
	}
	ok = true
	return &kernelTunnel{name: s.Interface, ns: nsName, applied: &cfg}, nil
}

// Reconfigure applies cfg to an existing kernel link inside nsName (used
// when adopting a namespace left by an earlier agent).
func Reconfigure(nsName, iface string, cfg wgtypes.Config) error {
	// A userspace device is configured through its UAPI socket from the
	// host's namespace: its guard judges a caller by the main thread,
	// which netns.Do may have moved into the confined namespace.
	if _, err := os.Stat(names.UAPISocket(iface)); err == nil {
		return configureHere(iface, cfg)
	}
	return netns.Do(nsName, func() error { return configureHere(iface, cfg) })
}

func configureHere(iface string, cfg wgtypes.Config) error {
	c, err := wgctrl.New()
	if err != nil {
		return fmt.Errorf("wgctrl: %w", err)
	}
	defer c.Close()
	if err := c.ConfigureDevice(iface, cfg); err != nil {
		return fmt.Errorf("configure wireguard %q: %w", iface, err)
	}
	return nil
}

// AdoptKernel returns a handle for a kernel link already in nsName.
func AdoptKernel(nsName, iface string) Tunnel { return &kernelTunnel{name: iface, ns: nsName} }

// AdoptKernelConfigured is AdoptKernel for a link just given cfg.
func AdoptKernelConfigured(nsName, iface string, cfg wgtypes.Config) Tunnel {
	return &kernelTunnel{name: iface, ns: nsName, applied: &cfg}
}

func (k *kernelTunnel) Backend() config.Backend { return config.BackendKernel }
func (k *kernelTunnel) Name() string            { return k.name }
func (k *kernelTunnel) Done() <-chan struct{}   { return nil }

// Stop deletes the link before it returns: the kernel link is the data
// plane itself, so it cannot be left to disappear later.
func (k *kernelTunnel) Stop() (<-chan struct{}, error) {
	gone := make(chan struct{})
	close(gone)
	return gone, k.Destroy()
}

func (k *kernelTunnel) Destroy() error {
	h, err := netns.Handle(k.ns)
	if err != nil {
		return nil // namespace gone: so is the link
	}
	defer h.Close()
	l, err := h.LinkByName(k.name)
	if err != nil {
		return nil
	}
	if err := h.LinkDel(l); err != nil {
		return fmt.Errorf("delete wireguard link %q: %w", k.name, err)
	}
	return nil
}
