package netns

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AllowedFamilies are the socket families a command run with Exec's
// User may create, as the confining drop-in's RestrictAddressFamilies=: IP
// through the namespace's interfaces, local IPC and netlink. AF_PACKET
// would pass the kill switch's DNS rules; AF_VSOCK reaches the hypervisor
// without any network interface.
var AllowedFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// refusedSyscall is a system call the filter refuses with EPERM, and why.
type refusedSyscall struct {
	name   string
	nr     uintptr // this architecture's number (x/sys/unix's SYS_*)
	reason string
}

// refusedSyscalls are what a command run with Exec's User cannot call at
// all (EPERM). The numbers are x/sys/unix's for the build's architecture;
// the arch check in front of the filter makes sure no other ABI's numbers
// reach it.
var refusedSyscalls = []refusedSyscall{
	{"ptrace", unix.SYS_PTRACE, "reads and writes another process's memory and registers: a process of the same user outside the namespace would act for it"},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV, "reads another process's memory"},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, "writes another process's memory"},
	{"pidfd_open", unix.SYS_PIDFD_OPEN, "the first step of pidfd_getfd"},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD, "takes a file descriptor out of another process: a socket of the host's namespace sends outside the tunnel"},
	{"kcmp", unix.SYS_KCMP, "compares other processes' files and memory: it tells what they hold"},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP, "IORING_OP_SOCKET creates sockets that the family check on socket(2) never sees (e.g. AF_VSOCK)"},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER, "io_uring, as io_uring_setup"},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER, "io_uring, as io_uring_setup"},
}

// refusedIoctls are ioctl(2) requests the filter refuses with EPERM. The
// kernel takes the request as an unsigned int, so the low 32 bits of the
// argument are all it reads, and all the filter compares.
var refusedIoctls = []struct {
	name string
	req  uint32
}{
	// Pushes input into a terminal, as if typed: into the shell that
	// started the command. (Exec already gives the command a session
	// without a controlling terminal, where TIOCSTI needs CAP_SYS_ADMIN:
	// this is the second wall.)
	{"TIOCSTI", unix.TIOCSTI},
	// On a virtual console: pastes the selection (input again), among
	// other things.
	{"TIOCLINUX", unix.TIOCLINUX},
}

// auditArch is this build's AUDIT_ARCH_* (seccomp's arch field). 32-bit
// arm and i386 are left out: their socketcall(2) multiplexer hides the
// family from the filter.
var auditArch = map[string]uint32{
	"amd64":   0xc000003e, // AUDIT_ARCH_X86_64
	"arm64":   0xc00000b7, // AUDIT_ARCH_AARCH64
	"riscv64": 0xc00000f3, // AUDIT_ARCH_RISCV64
}

// restrictSyscalls installs a seccomp filter on the calling thread (kept
// across fork and execve) under which
//   - every system call of a foreign architecture or ABI (an i386 binary
//     on x86_64, whose socketcall the filter could not read; an x32 one,
//     whose numbers carry bit 30) fails with ENOSYS;
//   - each of refusedSyscalls fails with EPERM;
//   - ioctl(2) with a request of refusedIoctls fails with EPERM;
//   - socket(2) and socketpair(2) fail with EAFNOSUPPORT for any family
//     but AllowedFamilies;
//
// and everything else is allowed. It needs no_new_privs or CAP_SYS_ADMIN.
func restrictSyscalls() error {
	prog, err := filterProgram()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("restrict system calls (seccomp): %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}

// filterProgram is restrictSyscalls' BPF program. Every jump is short
// (forward over a few instructions), so no offset nears the 255 limit.
func filterProgram() ([]unix.SockFilter, error) {
	arch, ok := auditArch[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("restrict system calls: no seccomp support for %s", runtime.GOARCH)
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		x32 = 0x40000000 // __X32_SYSCALL_BIT
		ret = unix.BPF_RET | unix.BPF_K
		// offsets in struct seccomp_data
		offNr   = 0
		offArch = 4
		offArg0 = 16 // low 32 bits of args[0] (little endian)
		offArg1 = 24 // low 32 bits of args[1]
	)
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	allow := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW}
	eperm := unix.SockFilter{Code: ret, K: errno(unix.EPERM)}
	prog := []unix.SockFilter{
		{Code: ld, K: offArch},
		{Code: jeq, K: arch, Jt: 1},
		{Code: ret, K: errno(unix.ENOSYS)},
		{Code: ld, K: offNr},
		{Code: jge, K: x32, Jf: 1},
		{Code: ret, K: errno(unix.ENOSYS)},
	}
	// A holds the number from here to the socket checks.
	for _, s := range refusedSyscalls {
		prog = append(prog, unix.SockFilter{Code: jeq, K: uint32(s.nr), Jf: 1}, eperm)
	}
	// ioctl: the refused requests get EPERM, any other is allowed.
	n := uint8(len(refusedIoctls))
	prog = append(prog,
		unix.SockFilter{Code: jeq, K: uint32(unix.SYS_IOCTL), Jf: n + 3},
		unix.SockFilter{Code: ld, K: offArg1})
	for i, r := range refusedIoctls {
		prog = append(prog, unix.SockFilter{Code: jeq, K: r.req, Jt: n - uint8(i)}) // to the EPERM below
	}
	prog = append(prog, allow, eperm)
	// socket, socketpair: only AllowedFamilies.
	prog = append(prog,
		unix.SockFilter{Code: jeq, K: uint32(unix.SYS_SOCKET), Jt: 1},
		unix.SockFilter{Code: jeq, K: uint32(unix.SYS_SOCKETPAIR), Jf: uint8(len(AllowedFamilies) + 2)},
		unix.SockFilter{Code: ld, K: offArg0},
	)
	for i, f := range AllowedFamilies {
		// Jump to "allow" (past the remaining checks and the errno).
		prog = append(prog, unix.SockFilter{Code: jeq, K: f, Jt: uint8(len(AllowedFamilies) - i)})
	}
	prog = append(prog, unix.SockFilter{Code: ret, K: errno(unix.EAFNOSUPPORT)}, allow)
	return prog, nil
}

func readSmall(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if len(b) > 64 {
		b = b[:64]
	}
	return b, err
}
