package bench

import (
	"fmt"
	"runtime"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"golang.org/x/sys/unix"
)

// nsThread is a goroutine locked to an OS thread that lives in one named
// network namespace. Whatever runs through Do opens its sockets and
// creates its links in that namespace, and child processes started there
// inherit it. The thread is never unlocked: it exits with the goroutine,
// so no other goroutine can ever run in the namespace by accident.
type nsThread struct {
	name string
	reqs chan func()
	quit chan struct{}
}

// startNSThread starts a thread in the named namespace.
func startNSThread(name string) (*nsThread, error) {
	t := &nsThread{name: name, reqs: make(chan func()), quit: make(chan struct{})}
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

// Do runs fn on the namespace's thread and returns its error.
func (t *nsThread) Do(fn func() error) error {
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
func (t *nsThread) Close() {
	select {
	case <-t.quit:
	default:
		close(t.quit)
	}
}
