package netns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	vnetns "github.com/vishvananda/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"golang.org/x/sys/unix"
)

// Exec replaces the current process with argv running inside the named
// namespace, the way `ip netns exec` does: in a private mount namespace,
// every file in /etc/netns/<name>/ is bind-mounted over /etc/<file> (so
// the command sees the namespace's resolv.conf and nsswitch.conf, never
// the host's), and /sys is remounted to show the namespace's interfaces.
// It only returns on error.
func Exec(name string, argv []string, env []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("exec: no command given")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	ns, err := Open(name)
	if err != nil {
		return err
	}
	// From here the thread's namespaces change; execve keeps only this
	// thread, so the whole new program runs in them.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("exec: unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "none", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("exec: make / a slave mount: %w", err)
	}
	// glibc asks nscd before NSS, and resolved answers over varlink and
	// D-Bus: hide all three, as the systemd drop-in does, or a lookup is
	// resolved on the host, outside the tunnel.
	if err := hideResolverIPC(); err != nil {
		return err
	}
	etc := names.ResolverDir(name)
	ents, _ := os.ReadDir(etc)
	for _, e := range ents {
		src, dst := filepath.Join(etc, e.Name()), filepath.Join("/etc", e.Name())
		if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("exec: bind %s over %s: %w", src, dst, err)
		}
	}
	if err := vnetns.Set(ns); err != nil {
		return fmt.Errorf("exec: enter netns %q: %w", name, err)
	}
	ns.Close()
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err == nil {
		unix.Mount(name, "/sys", "sysfs", 0, "")
	}
	return fmt.Errorf("exec %s: %w", path, unix.Exec(path, argv, env))
}

// hideResolverIPC covers names.Hidden(): directories by an empty
// read-only tmpfs, sockets by /dev/null.
func hideResolverIPC() error {
	for _, p := range names.Hidden() {
		st, err := os.Stat(p)
		if err != nil {
			continue // absent: nothing to hide
		}
		if st.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=000")
		} else {
			err = unix.Mount("/dev/null", p, "none", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("exec: hide %s: %w", p, err)
		}
	}
	return nil
}
