package wireguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Configure applies cfg to the live tunnel t in namespace ns: a userspace
// device through its own IpcSet (on this, a host-namespace thread, so a
// rebound UDP socket stays in the host namespace), a kernel link over
// netlink inside the namespace (its socket stays where it was born).
func Configure(t Tunnel, ns string, cfg wgtypes.Config) error {
	if u, ok := t.(*userspaceTunnel); ok {
		if err := u.dev.IpcSet(uapiConfig(cfg)); err != nil {
			return fmt.Errorf("configure wireguard %q: %w", u.name, err)
		}
		u.key.set(cfg.PrivateKey)
		return nil
	}
	return Reconfigure(ns, t.Name(), cfg)
}

// Reload applies the device configuration of s (its key and peers,
// endpoint names resolved now, before anything changes) to the live
// tunnel t, through Configure: a userspace tunnel records the key it is
// given, so a rotated key is not derived again at every later read. A
// nil t (no tunnel known) configures the link s names.
func Reload(ctx context.Context, t Tunnel, s *config.Spec) error {
	cfg, err := DeviceConfig(ctx, s)
	if err != nil {
		return err
	}
	if t == nil {
		return Reconfigure(s.Name, s.Interface, cfg)
	}
	return Configure(t, s.Name, cfg)
}

// Applied returns the device configuration t was created with (its
// endpoints as resolved then), when t knows it: the reference a later
// drift check compares with, without resolving names again.
func Applied(t Tunnel) (wgtypes.Config, bool) {
	switch x := t.(type) {
	case *userspaceTunnel:
		if x.applied != nil {
			return *x.applied, true
		}
	case *kernelTunnel:
		if x.applied != nil {
			return *x.applied, true
		}
	}
	return wgtypes.Config{}, false
}

// ReadDevice reads the live device of interface iface in namespace ns. A
// userspace device answers on its UAPI socket, which serves only clients
// in the host namespace: it is asked from this thread. A kernel device is
// asked inside the namespace. The private key never leaves this function.
func ReadDevice(ns, iface string) (*Device, error) { return readDevice(ns, iface, true) }

// ReadPeers is ReadDevice without the device's own public key (zero in
// the Device; a kernel device's is read anyway): status judges the
// peers, and deriving the public half of the private key (an X25519
// scalar multiplication) was a twentieth of a status's CPU.
func ReadPeers(ns, iface string) (*Device, error) { return readDevice(ns, iface, false) }

func readDevice(ns, iface string, public bool) (*Device, error) {
	if sock := names.UAPISocket(iface); fileExists(sock) {
		d, err := readUAPISocket(sock, public)
		if err != nil {
			return nil, fmt.Errorf("read wireguard %q: %w", iface, err)
		}
		return d, nil
	}
	in := func(f func() error) error { return netns.Do(ns, f) }
	var out *Device
	err := in(func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		d, err := c.Device(iface)
		if err != nil {
			return err
		}
		d.PrivateKey = wgtypes.Key{}
		out = &Device{PublicKey: d.PublicKey, ListenPort: d.ListenPort, FirewallMark: d.FirewallMark, Peers: d.Peers}
		for i := range out.Peers {
			out.Peers[i].PresharedKey = wgtypes.Key{}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read wireguard %q: %w", iface, err)
	}
	return out, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// uapiTimeout bounds a read of a userspace device's UAPI socket.
const uapiTimeout = 5 * time.Second

// readUAPISocket asks the userspace device whose UAPI socket is at path
// for its configuration: one dial and one "get", as wgctrl does, but
// without asking genetlink first and listing every socket of the
// directory (with N namespaces each read listed N sockets). The answer,
// which holds the private key, is read into one buffer that is wiped
// (and so is every smaller one it outgrew).
func readUAPISocket(path string, public bool) (*Device, error) {
	c, err := net.DialTimeout("unix", path, uapiTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(uapiTimeout))
	if _, err := io.WriteString(c, "get=1\n\n"); err != nil {
		return nil, err
	}
	buf, n := make([]byte, 16<<10), 0
	defer func() { clear(buf) }()
	// The answer ends with an empty line ("errno=0\n\n").
	for n < 2 || buf[n-2] != '\n' || buf[n-1] != '\n' {
		if n == len(buf) {
			if len(buf) >= 1<<20 {
				return nil, errors.New("uapi: answer over 1 MiB")
			}
			bigger := make([]byte, 2*len(buf))
			copy(bigger, buf)
			clear(buf)
			buf = bigger
		}
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			return nil, fmt.Errorf("uapi: %w", err)
		}
	}
	derive := func(k *wgtypes.Key) wgtypes.Key { return k.PublicKey() }
	if !public {
		derive = func(*wgtypes.Key) wgtypes.Key { return wgtypes.Key{} }
	}
	return parseUAPI(buf[:n], derive)
}
