package probe

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
)

// The oracle enters namespaces on its own, with no agent or testbed code
// in between, so a bug there cannot also blind the probes and captures.
// Only the network namespace changes (unlike `ip netns exec`, which
// unshares the mount namespace): a namespace the agent creates later
// stays visible.

// netnsDir is where iproute2 bind-mounts named namespaces.
const netnsDir = "/run/netns"

// InNetns runs fn on an OS thread that is switched into the named network
// namespace. Sockets fn creates stay in that namespace after InNetns
// returns. fn must not start goroutines that create sockets.
func InNetns(name string, fn func() error) error {
	target, err := netns.GetFromPath(filepath.Join(netnsDir, name))
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

// startIn starts cmd with its network namespace set to name (the mount
// namespace is unchanged). Wait for it as usual.
func startIn(name string, cmd *exec.Cmd) error {
	if err := InNetns(name, cmd.Start); err != nil {
		return fmt.Errorf("start %s in netns %s: %w", cmd.Path, name, err)
	}
	return nil
}
