// Package netns manages named network namespaces the way iproute2 does:
// a namespace is kept alive by a bind mount at /run/netns/<name>, which
// `ip netns` and systemd's NetworkNamespacePath= both understand.
package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"golang.org/x/sys/unix"
)

// Exists reports whether name is a live namespace bind mount (not merely a
// leftover file), or the process's own namespace (UseCurrent).
func Exists(name string) bool {
	if IsCurrent(name) {
		return true
	}
	var st unix.Statfs_t
	if err := unix.Statfs(names.Netns(name), &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// Create creates the named namespace with loopback up. It fails if a live
// namespace of that name exists; a stale file is replaced.
func Create(name string) error {
	if IsCurrent(name) {
		return fmt.Errorf("create netns %q: it is this process's own namespace (sidecar mode)", name)
	}
	if Exists(name) {
		return fmt.Errorf("create netns %q: %w", name, os.ErrExist)
	}
	if err := ensureSharedDir(); err != nil {
		return err
	}
	p := names.Netns(name)
	_ = os.Remove(p) // stale file from a crash: not a mount, safe to remove
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns %q: %w", name, err)
	}
	f.Close()

	err = inNewThreadNS(func(tid int) error {
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", tid)
		if err := unix.Mount(src, p, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount netns %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		os.Remove(p)
		return err
	}
	h, err := Handle(name)
	if err != nil {
		Delete(name)
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		Delete(name)
		return fmt.Errorf("set lo up in netns %q: %w", name, err)
	}
	return nil
}

// inNewThreadNS runs fn on a locked OS thread that has unshared a new
// network namespace. The thread is never returned to the scheduler: Go
// terminates a goroutine's locked thread when the goroutine exits without
// unlocking, so no other goroutine can ever run in that namespace.
func inNewThreadNS(fn func(tid int) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread dies with this goroutine.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		errc <- fn(unix.Gettid())
	}()
	return <-errc
}

// ensureSharedDir makes /run/netns a shared mount point, as iproute2 does,
// so namespaces created later propagate into other mount namespaces
// (services started with private mounts still see them).
func ensureSharedDir() error {
	if err := os.MkdirAll(names.NetnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", names.NetnsDir, err)
	}
	err := unix.Mount("", names.NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s shared: %w", names.NetnsDir, err)
	}
	// Not a mount point yet: bind it onto itself, then make it shared.
	if err := unix.Mount(names.NetnsDir, names.NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", names.NetnsDir, err)
	}
	if err := unix.Mount("", names.NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", names.NetnsDir, err)
	}
	return nil
}

// Delete removes the named namespace. A missing namespace is not an error.
// Links inside it are destroyed by the kernel once no process holds it.
func Delete(name string) error {
	if IsCurrent(name) {
		return nil // nothing to remove: the namespace is not the agent's to delete
	}
	p := names.Netns(name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %q: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %q: %w", name, err)
	}
	return nil
}

// Open returns a handle (file descriptor) of the named namespace.
func Open(name string) (vnetns.NsHandle, error) {
	h, err := vnetns.GetFromPath(Path(name))
	if err != nil {
		return vnetns.None(), fmt.Errorf("open netns %q: %w", name, err)
	}
	return h, nil
}

// Handle returns a netlink handle whose sockets live in the named
// namespace; no thread ever switches namespace. It is an rtnetlink
// handle (links, addresses, routes, rules): a method of another netlink
// family would open its socket in the caller's namespace.
func Handle(name string) (*netlink.Handle, error) {
	if IsCurrent(name) {
		return netlink.NewHandle(unix.NETLINK_ROUTE) // no setns: it needs CAP_SYS_ADMIN, which a sidecar has not
	}
	ns, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	// rtnetlink only: the library's default also opens an XFRM and a
	// netfilter socket, each entering the namespace and back, which no
	// caller uses (status paid three per namespace).
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in netns %q: %w", name, err)
	}
	return h, nil
}

// Do runs fn on a locked OS thread switched into the named namespace, for
// APIs that have no namespace parameter (wgctrl's generic netlink, /proc/sys
// writes). Sockets opened by fn stay in that namespace after it returns.
func Do(name string, fn func() error) error {
	if IsCurrent(name) {
		// Every thread of the process is in this namespace already: no setns
		// (a sidecar lacks the CAP_SYS_ADMIN it needs), and no locked thread
		// to throw away after each call.
		return fn()
	}
	ns, err := Open(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is never unlocked: it exits with this goroutine, so a
		// failure to switch back can never leak the namespace to others.
		if err := vnetns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter netns %q: %w", name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
