package wireguard

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// userspaceTunnel is an embedded wireguard-go device. Its TUN interface is
// created in the host namespace and moved; its UDP socket is opened by the
// agent's host-namespace threads; its UAPI socket lets `wg` and wgctrl
// inspect it.
type userspaceTunnel struct {
	name    string
	dev     *device.Device
	uapi    net.Listener
	once    sync.Once
	destroy error
	gone    chan struct{} // closed once the TUN link is gone (Stop)
	applied *wgtypes.Config
	key     keyRecord
}

// keyRecord is the private key a userspace device was last given through
// its tunnel (a pointer to the applied configuration's key, not a copy)
// and its public half, derived once there: an in-process read compares
// the device's key with it instead of deriving the public key each time.
type keyRecord struct {
	mu     sync.Mutex
	key    *wgtypes.Key
	public wgtypes.Key
}

// set records k (nil: keep the record), deriving its public half.
func (r *keyRecord) set(k *wgtypes.Key) {
	if k == nil {
		return
	}
	pub := k.PublicKey()
	r.mu.Lock()
	r.key, r.public = k, pub
	r.mu.Unlock()
}

// publicOf returns the public half of the device's private key priv: the
// recorded one when priv is the recorded key (compared in constant
// time), else derived (the key was changed some other way).
func (r *keyRecord) publicOf(priv *wgtypes.Key) wgtypes.Key {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.key != nil && subtle.ConstantTimeCompare(priv[:], r.key[:]) == 1 {
		return r.public
	}
	return priv.PublicKey()
}

// Device reads the device in process: wireguard-go's own "get", parsed
// here, with no UAPI socket, no wgctrl and no listing of
// /var/run/wireguard. The agent that owns the data plane reads it this
// way; other processes (status) go through the UAPI socket (ReadDevice).
// The text holds the private key: it is wiped once parsed.
func (u *userspaceTunnel) Device() (*Device, error) {
	var buf bytes.Buffer
	err := u.dev.IpcGetOperation(&buf) // one Write: the key is in no other buffer of ours
	defer clear(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("read wireguard %q: %w", u.name, err)
	}
	d, err := parseUAPI(buf.Bytes(), u.key.publicOf)
	if err != nil {
		return nil, fmt.Errorf("read wireguard %q: %w", u.name, err)
	}
	return d, nil
}

func createUserspace(log *slog.Logger, s *config.Spec, cfg wgtypes.Config, nsName string) (t Tunnel, err error) {
	// The TUN link is created directly inside the namespace, by a thread
	// that enters it and exits afterwards: the link never exists in the
	// host namespace, and no move is needed (moving a link costs an RCU
	// grace period). The birthplace trick is about the UDP socket, which
	// dev.Up below opens from this host-namespace thread.
	var td tun.Device
	err = netns.Do(nsName, func() error {
		var err error
		td, err = OpenTUN(s.Interface)
		return err
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			td.Close()
		}
	}()
	pace := newGCPace()
	btd, bind, read := bound(fixedMTU{td, s.MTU}, conn.NewDefaultBind(), s.PacketBuffers, pace)
	dev := device.NewDevice(btd, bind, deviceLogger(log, s.Interface))
	defer func() {
		if err != nil {
			dev.Close()
		}
	}()
	if err := dev.IpcSet(uapiConfig(cfg)); err != nil {
		return nil, fmt.Errorf("configure wireguard %q: %w", s.Interface, err)
	}
	// Up opens the UDP socket. This goroutine's thread is in the host
	// namespace (the agent never moves unlocked threads), so the
	// encrypted traffic leaves from the host, not the confined side.
	if err := dev.Up(); err != nil {
		return nil, fmt.Errorf("bring up wireguard %q: %w", s.Interface, err)
	}
	uf, err := ipc.UAPIOpen(s.Interface)
	if err != nil {
		return nil, fmt.Errorf("open UAPI socket for %q: %w", s.Interface, err)
	}
	// A plain listener, not ipc.UAPIListen: that one also watches the
	// socket file with inotify, and closing an inotify descriptor waits
	// for an SRCU grace period (10-30 ms here) on every teardown. The
	// engine removes the socket file itself.
	ul, err := net.FileListener(uf)
	uf.Close()
	if err != nil {
		os.Remove(names.UAPISocket(s.Interface))
		return nil, fmt.Errorf("listen on UAPI socket for %q: %w", s.Interface, err)
	}
	guard, err := newUAPIGuard()
	if err != nil {
		ul.Close()
		os.Remove(names.UAPISocket(s.Interface))
		return nil, err
	}
	ulog := log.With("iface", s.Interface)
	go func() {
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			if err := guard.allow(c); err != nil {
				ulog.Warn("UAPI connection refused", "reason", err)
				c.Close()
				continue
			}
			go dev.IpcHandle(c)
		}
	}()
	if read != nil {
		limitMemory(s.PacketBuffers)
		go func() {
			trimWhenIdle(idleTrimInterval, busyPackets, read, returnMemory, pace.rest, dev.Wait())
			pace.wake() // the device is gone: no idle spell of its own
		}()
	}
	u := &userspaceTunnel{name: s.Interface, dev: dev, uapi: ul, applied: &cfg}
	u.key.set(cfg.PrivateKey)
	return u, nil
}

// OpenTUN creates a TUN device in the calling thread's namespace, without
// wireguard-go's link monitors (they would watch the namespace of whichever
// thread opened their netlink socket). The engine drives the link's
// up/down state itself. IFF_VNET_HDR keeps TSO/GSO offloads on.
func OpenTUN(name string) (tun.Device, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create tun %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create tun %q: %w", name, err)
	}
	td, _, err := tun.CreateUnmonitoredTUNFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create tun %q: %w", name, err)
	}
	return td, nil
}

// fixedMTU reports the configured MTU: the TUN's own MTU query uses an
// ioctl in the caller's namespace, where the moved link no longer exists.
type fixedMTU struct {
	tun.Device
	mtu int
}

func (f fixedMTU) MTU() (int, error) { return f.mtu, nil }

func deviceLogger(log *slog.Logger, iface string) *device.Logger {
	l := log.With("iface", iface, "component", "wireguard-go")
	return &device.Logger{
		Verbosef: func(format string, args ...any) { l.Debug(fmt.Sprintf(format, args...)) },
		Errorf:   func(format string, args ...any) { l.Warn(fmt.Sprintf(format, args...)) },
	}
}

func (u *userspaceTunnel) Backend() config.Backend { return config.BackendUserspace }
func (u *userspaceTunnel) Name() string            { return u.name }
func (u *userspaceTunnel) Done() <-chan struct{}   { return u.dev.Wait() }

func (u *userspaceTunnel) Destroy() error {
	gone, err := u.Stop()
	<-gone
	return err
}

// Stop stops the data plane at once: the UAPI socket is removed and the
// device goes down, which closes its UDP socket and stops every peer, so
// nothing can leave through the tunnel any more. Closing the TUN fd, which
// makes the kernel unregister the link (an RCU grace period, about 20 ms
// here), runs in the background; the returned channel is closed when it is
// done.
func (u *userspaceTunnel) Stop() (<-chan struct{}, error) {
	u.once.Do(func() {
		u.gone = make(chan struct{})
		u.uapi.Close()
		if err := os.Remove(names.UAPISocket(u.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			u.destroy = err
		}
		if err := u.dev.Down(); err != nil {
			u.destroy = errors.Join(u.destroy, fmt.Errorf("stop wireguard %q: %w", u.name, err))
		}
		go func() {
			u.dev.Close() // closes the TUN fd: the kernel removes the link
			close(u.gone)
		}()
	})
	return u.gone, u.destroy
}
