package testbed

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"

	vnetns "github.com/vishvananda/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/sys/unix"
)

// Thread is a goroutine locked to an OS thread that lives in one named
// network namespace. Whatever runs through Do opens its sockets and
// creates its links in that namespace, and child processes started there
// inherit it. The thread is never unlocked: it exits with the goroutine,
// so no other goroutine can ever run in the namespace by accident.
type Thread struct {
	name string
	reqs chan func()
	quit chan struct{}
}

// StartThread starts a thread in the named namespace.
func StartThread(name string) (*Thread, error) {
	t := &Thread{name: name, reqs: make(chan func()), quit: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		fd, err := unix.Open(names.Netns(name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ready <- fmt.Errorf("open netns %q: %w", name, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			ready <- fmt.Errorf("enter netns %q: %w", name, err)
			return
		}
		ready <- nil
		for {
			select {
			case fn := <-t.reqs:
				fn()
			case <-t.quit:
				return
			}
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

// NS is the thread's namespace.
func (t *Thread) NS() string { return t.name }

// Do runs fn on the namespace's thread and returns its error.
func (t *Thread) Do(fn func() error) error {
	errc := make(chan error, 1)
	select {
	case t.reqs <- func() { errc <- fn() }:
	case <-t.quit:
		return fmt.Errorf("netns thread %q is closed", t.name)
	}
	return <-errc
}

// Close ends the thread. Children it started with Pdeathsig get their
// signal, so stop them first.
func (t *Thread) Close() {
	select {
	case <-t.quit:
	default:
		close(t.quit)
	}
}

// Do runs fn on an OS thread switched into the named namespace, then
// switches the thread back. Sockets fn opens stay in the namespace; fn
// must not start goroutines that open sockets. Unlike netns.Do the thread
// survives (unless switching back fails), so a child fn starts with
// Pdeathsig lives until its parent really exits.
func Do(name string, fn func() error) error {
	target, err := netns.Open(name)
	if err != nil {
		return err
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		orig, err := lockAndEnter(name, target)
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := vnetns.Set(orig); err != nil {
			// Leave the thread locked: the runtime destroys it when
			// this goroutine exits, so no other code runs in name.
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %q: %w", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Start starts cmd with its network namespace set to name; the mount
// namespace is unchanged, so namespaces created later by anyone stay
// visible to it. Wait for it as usual.
//
// The OS thread that forks the child stays locked (to a goroutine of its
// own) until the child exits. Linux sends Pdeathsig when the forking
// thread ends, not the process, and Go ends a thread whenever a goroutine
// exits locked to it (netns.Create does so on purpose): a forking thread
// handed back to the scheduler could be picked up and ended that way
// under a running child and kill it. The VM tier saw it: a decoy and a
// provider died, with no trace, right after the test created another
// namespace.
func Start(name string, cmd *exec.Cmd) error {
	target, err := netns.Open(name)
	if err != nil {
		return fmt.Errorf("start %s in netns %s: %w", cmd.Path, name, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		orig, err := lockAndEnter(name, target) // unlocked only if no child was started
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		serr := cmd.Start()
		if err := vnetns.Set(orig); err != nil {
			// Stays locked (and ends with this goroutine): no other
			// code runs in name.
			errc <- errors.Join(serr, fmt.Errorf("leave netns %q: %w", name, err))
		} else if serr != nil {
			runtime.UnlockOSThread()
			errc <- serr
			return
		} else {
			errc <- nil
		}
		if serr == nil {
			holdUntilExit(cmd.Process.Pid)
		}
		// Still locked: the thread ends with this goroutine, after the
		// child did.
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("start %s in netns %s: %w", cmd.Path, name, err)
	}
	return nil
}

// lockAndEnter locks the calling goroutine to its thread and moves the
// thread into target, returning the namespace it came from. On error the
// thread is back where it was and unlocked.
func lockAndEnter(name string, target vnetns.NsHandle) (vnetns.NsHandle, error) {
	runtime.LockOSThread()
	orig, err := vnetns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return orig, fmt.Errorf("get current netns: %w", err)
	}
	if err := vnetns.Set(target); err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		return orig, fmt.Errorf("enter netns %q: %w", name, err)
	}
	return orig, nil
}

// holdUntilExit blocks the calling (locked) thread until process pid has
// exited (a pidfd becomes readable when it terminates). If pid cannot be
// watched it blocks forever: a thread kept is cheaper than a child killed.
func holdUntilExit(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // already gone (and reaped)
	}
	if err != nil {
		select {}
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n > 0 {
			return
		}
		if err != nil {
			select {}
		}
	}
}
