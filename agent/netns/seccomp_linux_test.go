package netns

import (
	"runtime"
	"testing"
	"unsafe"

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
		if installErr = restrictSyscalls(); installErr != nil {
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

// TestRefusedSyscalls: under the filter each of refusedSyscalls and each
// refused ioctl request fails with EPERM; without it (the control) the
// same call, with the same arguments, fails otherwise or works, so the
// EPERM is the filter's.
func TestRefusedSyscalls(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	self := uintptr(unix.Getpid())
	var b byte = 'x'
	calls := map[string]func() unix.Errno{
		// A pid that cannot exist (above pid_max's limit): ESRCH.
		"ptrace":            func() unix.Errno { return raw(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1<<22+1, 0, 0, 0) },
		"process_vm_readv":  func() unix.Errno { return raw(unix.SYS_PROCESS_VM_READV, self, 0, 0, 0, 0) },
		"process_vm_writev": func() unix.Errno { return raw(unix.SYS_PROCESS_VM_WRITEV, self, 0, 0, 0, 0) },
		"pidfd_open":        func() unix.Errno { return closeRet(unix.SYS_PIDFD_OPEN, self, 0, 0, 0, 0) },
		"pidfd_getfd":       func() unix.Errno { return raw(unix.SYS_PIDFD_GETFD, ^uintptr(0), 0, 0, 0, 0) },
		"kcmp": func() unix.Errno {
			return raw(unix.SYS_KCMP, self, self, 0 /* KCMP_FILE */, uintptr(p[0]), uintptr(p[0]))
		},
		"io_uring_setup":    func() unix.Errno { return raw(unix.SYS_IO_URING_SETUP, 0, 0, 0, 0, 0) },
		"io_uring_enter":    func() unix.Errno { return raw(unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0) },
		"io_uring_register": func() unix.Errno { return raw(unix.SYS_IO_URING_REGISTER, ^uintptr(0), 0, 0, 0, 0) },
		// On a pipe, which is no terminal: ENOTTY.
		"ioctl TIOCSTI": func() unix.Errno {
			return raw(unix.SYS_IOCTL, uintptr(p[0]), unix.TIOCSTI, uintptr(unsafe.Pointer(&b)), 0, 0)
		},
		"ioctl TIOCLINUX": func() unix.Errno {
			return raw(unix.SYS_IOCTL, uintptr(p[0]), unix.TIOCLINUX, uintptr(unsafe.Pointer(&b)), 0, 0)
		},
		// TIOCSTI with bits above the 32 the kernel reads: still TIOCSTI.
		"ioctl TIOCSTI (high bits)": func() unix.Errno {
			return raw(unix.SYS_IOCTL, uintptr(p[0]), 1<<32|unix.TIOCSTI, uintptr(unsafe.Pointer(&b)), 0, 0)
		},
	}
	if unsafe.Sizeof(uintptr(0)) < 8 {
		delete(calls, "ioctl TIOCSTI (high bits)")
	}
	for _, s := range refusedSyscalls {
		if calls[s.name] == nil {
			t.Errorf("refusedSyscalls has %s, which this test does not try", s.name)
		}
	}
	for _, r := range refusedIoctls {
		if calls["ioctl "+r.name] == nil {
			t.Errorf("refusedIoctls has %s, which this test does not try", r.name)
		}
	}
	// Allowed: an ioctl of another request (FIONREAD, alias TIOCINQ, on the pipe).
	var avail int32
	fionread := func() unix.Errno {
		return raw(unix.SYS_IOCTL, uintptr(p[0]), unix.TIOCINQ, uintptr(unsafe.Pointer(&avail)), 0, 0)
	}
	control := map[string]unix.Errno{}
	onThread(func() {
		for n, f := range calls {
			control[n] = f()
		}
	})
	for n, e := range control {
		if e == unix.EPERM {
			t.Errorf("control: %s without the filter already fails with EPERM: the check below proves nothing", n)
		}
	}
	filtered := map[string]unix.Errno{}
	var installErr error
	var fionreadErr unix.Errno
	onThread(func() {
		if installErr = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); installErr != nil {
			return
		}
		if installErr = restrictSyscalls(); installErr != nil {
			return
		}
		for n, f := range calls {
			filtered[n] = f()
		}
		fionreadErr = fionread()
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	for n, e := range filtered {
		if e != unix.EPERM {
			t.Errorf("%s under the filter: got %v, want EPERM (without it: %v)", n, errnoString(e), errnoString(control[n]))
		}
	}
	if fionreadErr != 0 {
		t.Errorf("ioctl FIONREAD refused under the filter: %v", fionreadErr)
	}
}

// TestFilterProgramJumps: every jump of the program lands inside it, on or
// before a return (a jump past the end is a program the kernel refuses
// only at install time, on the command's thread).
func TestFilterProgramJumps(t *testing.T) {
	prog, err := filterProgram()
	if err != nil {
		t.Skip(err)
	}
	if len(prog) > 4096 {
		t.Fatalf("%d instructions: over BPF_MAXINSNS", len(prog))
	}
	for i, in := range prog {
		if in.Code&0x07 != unix.BPF_JMP {
			continue
		}
		for _, off := range []uint8{in.Jt, in.Jf} {
			if i+1+int(off) >= len(prog) {
				t.Errorf("instruction %d jumps to %d, past the end (%d)", i, i+1+int(off), len(prog))
			}
		}
	}
	if last := prog[len(prog)-1]; last.Code != unix.BPF_RET|unix.BPF_K {
		t.Errorf("the program does not end in a return: %+v", last)
	}
}

func raw(nr, a0, a1, a2, a3, a4 uintptr) unix.Errno {
	_, _, e := unix.Syscall6(nr, a0, a1, a2, a3, a4, 0)
	return e
}

// closeRet is raw for a call that returns a file descriptor.
func closeRet(nr, a0, a1, a2, a3, a4 uintptr) unix.Errno {
	fd, _, e := unix.Syscall6(nr, a0, a1, a2, a3, a4, 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return e
}

func errnoString(e unix.Errno) string {
	if e == 0 {
		return "success"
	}
	return e.Error()
}
