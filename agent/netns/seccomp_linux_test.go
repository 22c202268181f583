package netns

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// onThread runs f on a fresh OS thread that is discarded afterwards, so a
// seccomp filter or dropped privilege never reaches another test.
func onThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		f()
	}()
	<-done
}

func TestRestrictFamilies(t *testing.T) {
	testenv.NeedRoot(t, "the control opens an AF_PACKET socket")
	open := func(family, typ int) error {
		fd, err := unix.Socket(family, typ, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	var control error
	onThread(func() { control = open(unix.AF_PACKET, unix.SOCK_DGRAM) })
	if control != nil {
		t.Fatalf("control: root cannot open AF_PACKET without the filter: %v", control)
	}
	var errs map[string]error
	var pairErr, installErr error
	onThread(func() {
		if installErr = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); installErr != nil {
			return
		}
		if installErr = restrictFamilies(); installErr != nil {
			return
		}
		errs = map[string]error{
			"AF_PACKET":  open(unix.AF_PACKET, unix.SOCK_DGRAM),
			"AF_VSOCK":   open(unix.AF_VSOCK, unix.SOCK_STREAM),
			"AF_INET":    open(unix.AF_INET, unix.SOCK_DGRAM),
			"AF_INET6":   open(unix.AF_INET6, unix.SOCK_DGRAM),
			"AF_NETLINK": open(unix.AF_NETLINK, unix.SOCK_RAW),
			"AF_UNIX":    open(unix.AF_UNIX, unix.SOCK_STREAM),
		}
		var fds [2]int
		if fds, pairErr = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0); pairErr == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	for _, f := range []string{"AF_PACKET", "AF_VSOCK"} {
		if errs[f] != unix.EAFNOSUPPORT {
			t.Errorf("%s: got %v, want EAFNOSUPPORT", f, errs[f])
		}
	}
	for _, f := range []string{"AF_INET", "AF_INET6", "AF_NETLINK", "AF_UNIX"} {
		if errs[f] != nil {
			t.Errorf("%s refused: %v", f, errs[f])
		}
	}
	if pairErr != nil {
		t.Errorf("socketpair(AF_UNIX) refused: %v", pairErr)
	}
}
