package netns

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AllowedFamilies are the socket families a command run with Exec's
// RestrictFamilies may create, as the confining drop-in's
// RestrictAddressFamilies=: IP through the namespace's interfaces, local
// IPC and netlink. AF_PACKET would pass the kill switch's DNS rules;
// AF_VSOCK reaches the hypervisor without any network interface.
var AllowedFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// auditArch is this build's AUDIT_ARCH_* (seccomp's arch field). 32-bit
// arm and i386 are left out: their socketcall(2) multiplexer hides the
// family from the filter.
var auditArch = map[string]uint32{
	"amd64":   0xc000003e, // AUDIT_ARCH_X86_64
	"arm64":   0xc00000b7, // AUDIT_ARCH_AARCH64
	"riscv64": 0xc00000f3, // AUDIT_ARCH_RISCV64
}

// restrictFamilies installs a seccomp filter on the calling thread (kept
// across execve) under which socket(2) and socketpair(2) fail with
// EAFNOSUPPORT for any family but AllowedFamilies, and every system call of
// a foreign architecture or ABI (an i386 binary on x86_64, whose
// socketcall the filter could not read; an x32 one, whose numbers carry
// bit 30) fails with ENOSYS. It needs no_new_privs or CAP_SYS_ADMIN.
func restrictFamilies() error {
	arch, ok := auditArch[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("restrict socket families: no seccomp support for %s", runtime.GOARCH)
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
	)
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	prog := []unix.SockFilter{
		{Code: ld, K: offArch},
		{Code: jeq, K: arch, Jt: 1},
		{Code: ret, K: errno(unix.ENOSYS)},
		{Code: ld, K: offNr},
		{Code: jge, K: x32, Jf: 1},
		{Code: ret, K: errno(unix.ENOSYS)},
		{Code: jeq, K: uint32(unix.SYS_SOCKET), Jt: 1},
		{Code: jeq, K: uint32(unix.SYS_SOCKETPAIR), Jf: uint8(len(AllowedFamilies) + 2)},
		{Code: ld, K: offArg0},
	}
	for i, f := range AllowedFamilies {
		// Jump to "allow" (past the remaining checks and the errno).
		prog = append(prog, unix.SockFilter{Code: jeq, K: f, Jt: uint8(len(AllowedFamilies) - i)})
	}
	prog = append(prog,
		unix.SockFilter{Code: ret, K: errno(unix.EAFNOSUPPORT)},
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW},
	)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("restrict socket families (seccomp): %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}

func readSmall(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if len(b) > 64 {
		b = b[:64]
	}
	return b, err
}
