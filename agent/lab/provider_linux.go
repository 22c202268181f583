// Package lab builds a self-contained WireGuard "provider" for the demo:
// a network namespace holding a userspace WireGuard peer, a DNS server and
// an HTTP target, linked by a veth to a simulated host namespace. Nothing
// touches the machine's own network: everything lives in namespaces the
// lab creates and removes.
package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Addresses used inside the lab's namespaces only (TEST-NET-1 and a
// private tunnel range); they are never routed to the real network.
var (
	HostAddr     = netip.MustParsePrefix("192.0.2.1/24") // simulated host's uplink
	EndpointAddr = netip.MustParsePrefix("192.0.2.2/24") // provider's public side
	TunnelServer = netip.MustParsePrefix("10.66.0.1/24") // provider inside the tunnel: DNS + HTTP
	TunnelClient = netip.MustParsePrefix("10.66.0.2/32") // the confined side
	TargetName   = "target.demo"
	ListenPort   = 51820
	Greeting     = "hello from the far side of the tunnel"
)

// Lab is a running provider with its simulated host.
type Lab struct {
	Host, Provider string // namespace names
	ClientKey      wgtypes.Key
	ServerPub      wgtypes.Key
	dev            *device.Device
	servers        []func()
}

// Start creates the namespaces, the peer and its services. prefix makes
// the names unique (≤ 8 characters).
func Start(prefix string) (l *Lab, err error) {
	l = &Lab{Host: prefix + "-host", Provider: prefix + "-prov"}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for _, n := range []string{l.Host, l.Provider} {
		if err := netns.Create(n); err != nil {
			return nil, err
		}
	}
	if err := l.link(); err != nil {
		return nil, err
	}
	serverKey, _ := wgtypes.GeneratePrivateKey()
	if l.ClientKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		return nil, err
	}
	l.ServerPub = serverKey.PublicKey()
	if err := l.startPeer(serverKey); err != nil {
		return nil, err
	}
	return l, l.startServices()
}

func (l *Lab) link() error {
	la := netlink.NewLinkAttrs()
	la.Name = "vdh" + fmt.Sprint(os.Getpid()%100000)
	peer := "vdp" + fmt.Sprint(os.Getpid()%100000)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: peer}); err != nil {
		return fmt.Errorf("lab veth: %w", err)
	}
	for _, side := range []struct {
		link, ns string
		addr     netip.Prefix
	}{{la.Name, l.Host, HostAddr}, {peer, l.Provider, EndpointAddr}} {
		lk, err := netlink.LinkByName(side.link)
		if err != nil {
			return err
		}
		ns, err := netns.Open(side.ns)
		if err != nil {
			return err
		}
		err = netlink.LinkSetNsFd(lk, int(ns))
		ns.Close()
		if err != nil {
			return fmt.Errorf("lab: move %s: %w", side.link, err)
		}
		h, err := netns.Handle(side.ns)
		if err != nil {
			return err
		}
		lk, err = h.LinkByName(side.link)
		if err == nil {
			err = h.AddrAdd(lk, &netlink.Addr{IPNet: ipnet(side.addr)})
		}
		if err == nil {
			err = h.LinkSetUp(lk)
		}
		h.Close()
		if err != nil {
			return fmt.Errorf("lab: configure %s: %w", side.link, err)
		}
	}
	return nil
}

// startPeer runs an embedded wireguard-go peer whose TUN and UDP socket
// both live in the provider namespace.
func (l *Lab) startPeer(key wgtypes.Key) error {
	return inNS(l.Provider, func() error {
		// Unmonitored: no link events can later call device.Up from a
		// thread outside this namespace and reopen the socket elsewhere.
		td, err := wireguard.OpenTUN("wgprov")
		if err != nil {
			return fmt.Errorf("lab tun: %w", err)
		}
		l.dev = device.NewDevice(td, conn.NewDefaultBind(), device.NewLogger(device.LogLevelSilent, ""))
		client := l.ClientKey.PublicKey()
		cfg := fmt.Sprintf("private_key=%x\nlisten_port=%d\npublic_key=%x\nallowed_ip=%s\n",
			key[:], ListenPort, client[:], TunnelClient)
		if err := l.dev.IpcSet(cfg); err != nil {
			return fmt.Errorf("lab peer config: %w", err)
		}
		if err := l.dev.Up(); err != nil { // UDP socket opened on this (provider) thread
			return fmt.Errorf("lab peer up: %w", err)
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		lk, err := h.LinkByName("wgprov")
		if err == nil {
			err = h.AddrAdd(lk, &netlink.Addr{IPNet: ipnet(TunnelServer)})
		}
		if err == nil {
			err = h.LinkSetUp(lk)
		}
		return err
	})
}

func (l *Lab) startServices() error {
	var udp net.PacketConn
	var tcp53, web net.Listener
	err := inNS(l.Provider, func() (err error) {
		a := TunnelServer.Addr().String()
		if udp, err = net.ListenPacket("udp", a+":53"); err != nil {
			return err
		}
		if tcp53, err = net.Listen("tcp", a+":53"); err != nil {
			return err
		}
		web, err = net.Listen("tcp", a+":80")
		return err
	})
	if err != nil {
		return fmt.Errorf("lab services: %w", err)
	}
	go serveDNS(udp, tcp53)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s (you are %s)\n", Greeting, r.RemoteAddr)
	})}
	go srv.Serve(web)
	l.servers = append(l.servers, func() { udp.Close(); tcp53.Close(); srv.Close() })
	return nil
}

// WriteConfig writes a wg-quick file and agent config for a confined
// namespace called name into dir, and returns the config path.
func (l *Lab) WriteConfig(dir, name string) (string, error) {
	wg := filepath.Join(dir, name+".conf")
	body := fmt.Sprintf("# Local demo provider (no VPN account needed)\n[Interface]\nPrivateKey = %s\nAddress = %s\nDNS = %s\n\n[Peer]\nPublicKey = %s\nEndpoint = %s:%d\nAllowedIPs = 0.0.0.0/0\nPersistentKeepalive = 15\n",
		l.ClientKey, TunnelClient, TunnelServer.Addr(), l.ServerPub, EndpointAddr.Addr(), ListenPort)
	if err := os.WriteFile(wg, []byte(body), 0o600); err != nil {
		return "", err
	}
	cfg := filepath.Join(dir, name+".json")
	js := fmt.Sprintf("{\n  \"name\": %q,\n  \"wireguard\": { \"configFile\": %q }\n}\n", name, wg)
	return cfg, os.WriteFile(cfg, []byte(js), 0o644)
}

// StopPeer takes the provider's WireGuard peer down (a dead VPN server).
func (l *Lab) StopPeer() {
	if l.dev != nil {
		l.dev.Close()
		l.dev = nil
	}
}

// HostCommand returns a command that runs in the simulated host namespace
// (network namespace only; the mount namespace stays shared so namespaces
// the agent creates are visible to everyone).
func (l *Lab) HostCommand(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + names.Netns(l.Host), "--"}, argv...)...)
}

// Close removes everything the lab created.
func (l *Lab) Close() error {
	for _, f := range l.servers {
		f()
	}
	l.StopPeer()
	var errs []error
	for _, n := range []string{l.Host, l.Provider} {
		if n != "" {
			errs = append(errs, netns.Delete(n))
		}
	}
	return errors.Join(errs...)
}

// inNS runs fn on a thread in the named namespace; sockets it opens stay
// there. The thread is discarded afterwards.
func inNS(name string, fn func() error) error {
	return netns.Do(name, fn)
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
