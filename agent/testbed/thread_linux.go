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
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := vnetns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %q: %w", name, err)
			return
		}
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
func Start(name string, cmd *exec.Cmd) error {
	if err := Do(name, cmd.Start); err != nil {
		return fmt.Errorf("start %s in netns %s: %w", cmd.Path, name, err)
	}
	return nil
}
