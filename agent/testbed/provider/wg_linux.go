package provider

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
)

// wgDevice is a running wireguard-go device and its UAPI listener.
type wgDevice struct {
	dev  *device.Device
	uapi net.Listener
}

func (w *wgDevice) Close() error {
	if w.uapi != nil {
		w.uapi.Close()
	}
	w.dev.Close() // also closes and removes the TUN
	return nil
}

// startWireGuard creates the link in the calling thread's namespace,
// configures the device, then addresses and routes.
func startWireGuard(c *WireGuard, log *eventLog) (io.Closer, error) {
	if c.Interface == "" {
		return nil, errors.New("wireguard.interface is required")
	}
	if c.MTU == 0 {
		c.MTU = 1420
	}
	if c.Kernel {
		return startKernel(c)
	}
	uapiConf, err := uapiConfig(c)
	if err != nil {
		return nil, err
	}
	// Unmonitored: no link event can later call device.Up from a thread
	// outside this namespace and reopen the socket elsewhere.
	tdev, err := wireguard.OpenTUN(c.Interface)
	if err != nil {
		return nil, err
	}
	logger := &device.Logger{
		Verbosef: device.DiscardLogf,
		Errorf:   func(f string, a ...any) { log.errorf("wireguard: "+f, a...) },
	}
	w := &wgDevice{dev: device.NewDevice(tdev, conn.NewDefaultBind(), logger)}
	if err := w.dev.IpcSet(uapiConf); err != nil {
		w.Close()
		return nil, fmt.Errorf("configure wireguard device %s: %w", c.Interface, err)
	}
	if err := w.dev.Up(); err != nil { // the UDP socket opens on this thread
		w.Close()
		return nil, fmt.Errorf("wireguard device %s up: %w", c.Interface, err)
	}
	if err := configureLink(c); err != nil {
		w.Close()
		return nil, err
	}
	if c.UAPI {
		if err := w.serveUAPI(c.Interface); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

func (w *wgDevice) serveUAPI(iface string) error {
	f, err := ipc.UAPIOpen(iface)
	if err != nil {
		return fmt.Errorf("uapi open %s: %w", iface, err)
	}
	if w.uapi, err = ipc.UAPIListen(iface, f); err != nil {
		return fmt.Errorf("uapi listen %s: %w", iface, err)
	}
	go func() {
		for {
			conn, err := w.uapi.Accept()
			if err != nil {
				return
			}
			go w.dev.IpcHandle(conn)
		}
	}()
	return nil
}

// kernelLink is a kernel WireGuard link; closing deletes it.
type kernelLink struct{ name string }

func (k kernelLink) Close() error {
	l, err := netlink.LinkByName(k.name)
	if err != nil {
		return nil // already gone
	}
	return netlink.LinkDel(l)
}

// startKernel creates a kernel WireGuard link and configures it through
// wgctrl (generic netlink, in the calling thread's namespace).
func startKernel(c *WireGuard) (io.Closer, error) {
	cfg, err := wgctrlConfig(c)
	if err != nil {
		return nil, err
	}
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = c.Interface, c.MTU
	if err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: la}); err != nil {
		return nil, fmt.Errorf("create kernel wireguard link %s: %w", c.Interface, err)
	}
	k := kernelLink{c.Interface}
	wc, err := wgctrl.New()
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	defer wc.Close()
	if err := wc.ConfigureDevice(c.Interface, cfg); err != nil {
		k.Close()
		return nil, fmt.Errorf("configure kernel wireguard link %s: %w", c.Interface, err)
	}
	if err := configureLink(c); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// wgctrlConfig renders c for wgctrl.
func wgctrlConfig(c *WireGuard) (wgtypes.Config, error) {
	key, err := wgtypes.ParseKey(c.PrivateKey)
	if err != nil {
		return wgtypes.Config{}, fmt.Errorf("wireguard.privateKey: %w", err)
	}
	port := c.ListenPort
	cfg := wgtypes.Config{PrivateKey: &key, ListenPort: &port, ReplacePeers: true}
	for i, p := range c.Peers {
		pub, err := wgtypes.ParseKey(p.PublicKey)
		if err != nil {
			return cfg, fmt.Errorf("wireguard.peers[%d].publicKey: %w", i, err)
		}
		pc := wgtypes.PeerConfig{PublicKey: pub, ReplaceAllowedIPs: true}
		if p.Endpoint != "" {
			ap, err := netip.ParseAddrPort(p.Endpoint)
			if err != nil {
				return cfg, fmt.Errorf("wireguard.peers[%d].endpoint: %w", i, err)
			}
			pc.Endpoint = net.UDPAddrFromAddrPort(ap)
		}
		if p.PersistentKeepalive > 0 {
			d := time.Duration(p.PersistentKeepalive) * time.Second
			pc.PersistentKeepaliveInterval = &d
		}
		for _, a := range p.AllowedIPs {
			pfx, err := netip.ParsePrefix(a)
			if err != nil {
				return cfg, fmt.Errorf("wireguard.peers[%d].allowedIPs: %w", i, err)
			}
			pc.AllowedIPs = append(pc.AllowedIPs, *prefixNet(pfx.Masked()))
		}
		cfg.Peers = append(cfg.Peers, pc)
	}
	return cfg, nil
}

func hexKey(field, b64 string) (string, error) {
	k, err := wgtypes.ParseKey(b64)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return hex.EncodeToString(k[:]), nil
}

// uapiConfig renders c in the cross-platform UAPI "set" format.
func uapiConfig(c *WireGuard) (string, error) {
	var b strings.Builder
	k, err := hexKey("wireguard.privateKey", c.PrivateKey)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "private_key=%s\nlisten_port=%d\nreplace_peers=true\n", k, c.ListenPort)
	for i, p := range c.Peers {
		pk, err := hexKey(fmt.Sprintf("wireguard.peers[%d].publicKey", i), p.PublicKey)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "public_key=%s\n", pk)
		if p.Endpoint != "" {
			ap, err := netip.ParseAddrPort(p.Endpoint)
			if err != nil {
				return "", fmt.Errorf("wireguard.peers[%d].endpoint: %w", i, err)
			}
			fmt.Fprintf(&b, "endpoint=%s\n", ap)
		}
		if p.PersistentKeepalive > 0 {
			fmt.Fprintf(&b, "persistent_keepalive_interval=%d\n", p.PersistentKeepalive)
		}
		b.WriteString("replace_allowed_ips=true\n")
		for _, a := range p.AllowedIPs {
			pfx, err := netip.ParsePrefix(a)
			if err != nil {
				return "", fmt.Errorf("wireguard.peers[%d].allowedIPs: %w", i, err)
			}
			fmt.Fprintf(&b, "allowed_ip=%s\n", pfx.Masked())
		}
	}
	return b.String(), nil
}

// configureLink sets the MTU, puts addresses (without DAD) and routes on
// the link and brings it up.
func configureLink(c *WireGuard) error {
	link, err := netlink.LinkByName(c.Interface)
	if err != nil {
		return fmt.Errorf("find link %s: %w", c.Interface, err)
	}
	if err := netlink.LinkSetMTU(link, c.MTU); err != nil {
		return fmt.Errorf("set mtu of %s: %w", c.Interface, err)
	}
	if c.NoIPv6 {
		p := "/proc/sys/net/ipv6/conf/" + c.Interface + "/disable_ipv6"
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("disable ipv6 on %s: %w", c.Interface, err)
		}
	}
	for _, a := range c.Addresses {
		pfx, err := netip.ParsePrefix(a)
		if err != nil {
			return fmt.Errorf("wireguard.addresses: %w", err)
		}
		addr := &netlink.Addr{IPNet: prefixNet(pfx)}
		if pfx.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("add address %s to %s: %w", a, c.Interface, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", c.Interface, err)
	}
	if err := waitAddrsUsable(link); err != nil {
		return err
	}
	for _, r := range c.Routes {
		pfx, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			return fmt.Errorf("wireguard.routes: %w", err)
		}
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(pfx.Masked()), Scope: netlink.SCOPE_LINK}
		if r.Src != "" {
			src, err := netip.ParseAddr(r.Src)
			if err != nil {
				return fmt.Errorf("wireguard.routes: source: %w", err)
			}
			route.Src = src.AsSlice()
		}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("add route %s dev %s: %w", r.Dst, c.Interface, err)
		}
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// waitAddrsUsable waits until no address on link is tentative. With DAD
// off, an address still stays tentative until the link is IPv6-ready,
// which the kernel may delay by up to a second after carrier-on for
// devices whose ifindex equals their iflink (TUN).
func waitAddrsUsable(link netlink.Link) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			return fmt.Errorf("list addresses of %s: %w", link.Attrs().Name, err)
		}
		tentative := ""
		for _, a := range addrs {
			if a.Flags&unix.IFA_F_TENTATIVE != 0 {
				tentative = a.IP.String()
			}
		}
		if tentative == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: address %s still tentative after 5s", link.Attrs().Name, tentative)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
