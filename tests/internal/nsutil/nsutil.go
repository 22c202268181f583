// Package nsutil runs code and processes inside named network namespaces
// (/run/netns/<name>) without changing the mount namespace.
//
// Unlike `ip netns exec`, which unshares the mount namespace and makes every
// mount a slave, Do and Start only switch the network namespace. That
// matters for the agent: a namespace it creates (a bind mount on
// /run/netns/<name>) must be visible to the tests, which live in the root
// mount namespace.
package nsutil

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where iproute2 bind-mounts named namespaces.
const Dir = "/run/netns"

// Path returns the bind-mount path of a named namespace.
func Path(name string) string { return filepath.Join(Dir, name) }

// Do runs fn on an OS thread that is switched into the named network
// namespace. Sockets fn creates stay in that namespace after Do returns.
// fn must not start goroutines that create sockets.
func Do(name string, fn func() error) error {
	target, err := netns.GetFromPath(Path(name))
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime destroys it when
			// this goroutine exits, so no other code runs in name.
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Start starts cmd with its network namespace set to name (the mount
// namespace is unchanged). Wait for it as usual.
func Start(name string, cmd *exec.Cmd) error {
	if err := Do(name, cmd.Start); err != nil {
		return fmt.Errorf("start %s in netns %s: %w", cmd.Path, name, err)
	}
	return nil
}

// Output runs argv in the named namespace via `ip netns exec` and returns
// its combined output. Use it for tools (ip, nft, sysctl) that do not need
// to see mounts made later by other processes.
func Output(name string, argv ...string) ([]byte, error) {
	args := append([]string{"netns", "exec", name}, argv...)
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ip netns exec %s %v: %w: %s", name, argv, err, trim(out))
	}
	return out, nil
}

// Mounted reports whether /run/netns/<name> is a live namespace (an nsfs
// bind mount), not just a leftover file.
func Mounted(name string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(Path(name), &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

func trim(b []byte) string {
	const max = 2000
	if len(b) > max {
		b = b[:max]
	}
	return string(b)
}
