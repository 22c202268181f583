package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The checks of what a confined process may do to its terminal and to
// other processes (issue 20, findings 1 and 2).

// tiocsti pushes TEXT into the terminal open on FD (a number) or
// /dev/tty, as if typed, with ioctl(TIOCSTI). It does not print TEXT, so
// a test reading the terminal's other side sees it only if it went in.
func tiocsti(args []string) (string, error) {
	if len(args) != 2 {
		return "", usageError("want FD-or-/dev/tty TEXT")
	}
	fd, err := openTarget(args[0])
	if err != nil {
		return "", err
	}
	for i := 0; i < len(args[1]); i++ {
		b := args[1][i]
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&b))); e != 0 {
			return "", fmt.Errorf("ioctl(TIOCSTI) on %s: %w", args[0], e)
		}
	}
	return fmt.Sprintf("(%d bytes pushed into %s)", len(args[1]), args[0]), nil
}

func openTarget(s string) (int, error) {
	if fd, err := strconv.Atoi(s); err == nil {
		return fd, nil
	}
	if s != "/dev/tty" {
		return 0, usageError(fmt.Sprintf("%q is neither a file descriptor nor /dev/tty", s))
	}
	fd, err := unix.Open(s, unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return 0, fmt.Errorf("open /dev/tty: %w", err)
	}
	return fd, nil
}

// pidfdGetfd takes file descriptor FD out of process PID (pidfd_open,
// pidfd_getfd) and, given ADDR:PORT, sends a datagram on it (a UDP
// socket of another network namespace sends from there).
func pidfdGetfd(args []string) (string, error) {
	if len(args) != 2 && len(args) != 3 {
		return "", usageError("want PID FD [ADDR:PORT]")
	}
	pid, err1 := strconv.Atoi(args[0])
	target, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil {
		return "", usageError("PID and FD are numbers")
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return "", fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, target, 0)
	if err != nil {
		return "", fmt.Errorf("pidfd_getfd(%d, %d): %w", pid, target, err)
	}
	defer unix.Close(fd)
	if len(args) == 2 {
		return fmt.Sprintf("(fd %d of pid %d is our fd %d)", target, pid, fd), nil
	}
	ap, err := net.ResolveUDPAddr("udp4", args[2])
	if err != nil || ap.IP.To4() == nil {
		return "", usageError(fmt.Sprintf("%q is not an IPv4 ADDR:PORT", args[2]))
	}
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	if err := unix.Sendto(fd, []byte("sandboxprobe pidfd-getfd"), 0, sa); err != nil {
		return "", fmt.Errorf("send on the stolen fd: %w", err)
	}
	return fmt.Sprintf("(fd %d of pid %d sent a datagram to %s)", target, pid, args[2]), nil
}

// ptraceAttach attaches to PID without stopping it (PTRACE_SEIZE) and
// detaches again.
func ptraceAttach(args []string) (string, error) {
	pid, err := onePID(args)
	if err != nil {
		return "", err
	}
	runtime.LockOSThread() // ptrace's tracer is the thread
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0); e != 0 {
		return "", fmt.Errorf("ptrace(PTRACE_SEIZE, %d): %w", pid, e)
	}
	unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, 0, 0, 0)
	return fmt.Sprintf("(attached to pid %d)", pid), nil
}

// processVMRead reads 16 bytes of PID's first readable mapping
// (process_vm_readv).
func processVMRead(args []string) (string, error) {
	pid, err := onePID(args)
	if err != nil {
		return "", err
	}
	addr, err := readableAddr(pid)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 16)
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	remote := []unix.RemoteIovec{{Base: addr, Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil {
		return "", fmt.Errorf("process_vm_readv(%d, %#x): %w", pid, addr, err)
	}
	return fmt.Sprintf("(%d bytes of pid %d at %#x)", n, pid, addr), nil
}

// readableAddr is the start of pid's first readable mapping.
func readableAddr(pid int) (uintptr, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 2 || !strings.HasPrefix(fs[1], "r") {
			continue
		}
		start, _, _ := strings.Cut(fs[0], "-")
		a, err := strconv.ParseUint(start, 16, 64)
		if err == nil {
			return uintptr(a), nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/maps: no readable mapping", pid)
}

// kcmpFiles compares our stdin with PID's (default: our own pid) with
// kcmp(KCMP_FILE).
func kcmpFiles(args []string) (string, error) {
	pid := os.Getpid()
	if len(args) > 0 {
		var err error
		if pid, err = onePID(args); err != nil {
			return "", err
		}
	}
	const kcmpFile = 0
	r, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(pid), kcmpFile, 0, 0, 0)
	if e != 0 {
		return "", fmt.Errorf("kcmp(%d, %d, KCMP_FILE): %w", os.Getpid(), pid, e)
	}
	return fmt.Sprintf("(stdin of %d and %d compare %d)", os.Getpid(), pid, r), nil
}

// procPIDs counts the processes this process sees in /proc. It always
// succeeds; the test judges the number ("N pids: 1 2 ...").
func procPIDs(args []string) (string, error) {
	if len(args) != 0 {
		return "", usageError("takes no arguments")
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return "", err
	}
	var pids []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, e.Name())
		}
	}
	return fmt.Sprintf("%d pids: %s", len(pids), strings.Join(pids, " ")), nil
}

func onePID(args []string) (int, error) {
	if len(args) != 1 {
		return 0, usageError("want one PID")
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil || pid <= 0 {
		return 0, usageError(fmt.Sprintf("%q is not a PID", args[0]))
	}
	return pid, nil
}
