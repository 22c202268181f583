package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// families are the socket families iouring-socket may try.
var families = map[string]struct{ family, typ int }{
	"vsock":  {unix.AF_VSOCK, unix.SOCK_STREAM},
	"packet": {unix.AF_PACKET, unix.SOCK_DGRAM},
	"inet":   {unix.AF_INET, unix.SOCK_DGRAM},
}

// ioUringSocket creates a socket with IORING_OP_SOCKET (Linux 5.19), the
// path that a seccomp filter on socket(2) alone never sees.
func ioUringSocket(args []string) (string, error) {
	if len(args) != 1 {
		return "", usageError("want one FAMILY: vsock, packet or inet")
	}
	f, ok := families[args[0]]
	if !ok {
		return "", usageError(fmt.Sprintf("unknown family %q: vsock, packet or inet", args[0]))
	}
	r, err := newRing()
	if err != nil {
		return "", err
	}
	defer r.close()
	res, err := r.do(sqe{opcode: opSocket, fd: int32(f.family), off: uint64(f.typ)})
	if err != nil {
		return "", err
	}
	if res < 0 {
		return "", fmt.Errorf("IORING_OP_SOCKET: %w", unix.Errno(-res))
	}
	unix.Close(int(res))
	return fmt.Sprintf("(%s socket fd %d)", args[0], res), nil
}

const (
	opSocket        = 45 // IORING_OP_SOCKET
	enterGetEvents  = 1  // IORING_ENTER_GETEVENTS
	offSQRing       = 0
	offCQRing       = 0x8000000
	offSQEs         = 0x10000000
	sqeSize         = 64
	cqeSize         = 16
	ringEntries     = 4
	sizeofRingParam = 120
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqOffsets
	cqOff                                                                  cqOffsets
}

type sqOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// sqe is the part of struct io_uring_sqe a socket request uses.
type sqe struct {
	opcode uint8
	fd     int32
	off    uint64
}

type ring struct {
	fd         int
	p          params
	sq, cq, es []byte
}

var _ [sizeofRingParam - unsafe.Sizeof(params{})]struct{} // the layout is the kernel's

func newRing() (*ring, error) {
	r := &ring{}
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, ringEntries, uintptr(unsafe.Pointer(&r.p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r.fd = int(fd)
	var err error
	if r.sq, err = unix.Mmap(r.fd, offSQRing, int(r.p.sqOff.array+r.p.sqEntries*4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap SQ ring: %w", err)
	}
	if r.cq, err = unix.Mmap(r.fd, offCQRing, int(r.p.cqOff.cqes+r.p.cqEntries*cqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap CQ ring: %w", err)
	}
	if r.es, err = unix.Mmap(r.fd, offSQEs, int(r.p.sqEntries*sqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap SQEs: %w", err)
	}
	return r, nil
}

func u32(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

// do submits one request and waits for its completion's result.
func (r *ring) do(s sqe) (int32, error) {
	tail := *u32(r.sq, r.p.sqOff.tail)
	idx := tail & *u32(r.sq, r.p.sqOff.ringMask)
	e := r.es[idx*sqeSize : (idx+1)*sqeSize]
	clear(e)
	e[0] = s.opcode
	*(*int32)(unsafe.Pointer(&e[4])) = s.fd
	*(*uint64)(unsafe.Pointer(&e[8])) = s.off
	*u32(r.sq, r.p.sqOff.array+idx*4) = idx
	*u32(r.sq, r.p.sqOff.tail) = tail + 1 // x86/arm64 Go stores are not reordered past the syscall
	if _, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 1, enterGetEvents, 0, 0); e != 0 {
		return 0, fmt.Errorf("io_uring_enter: %w", e)
	}
	head := *u32(r.cq, r.p.cqOff.head)
	if head == *u32(r.cq, r.p.cqOff.tail) {
		return 0, fmt.Errorf("io_uring: no completion")
	}
	c := r.p.cqOff.cqes + (head&*u32(r.cq, r.p.cqOff.ringMask))*cqeSize
	res := *(*int32)(unsafe.Pointer(&r.cq[c+8]))
	*u32(r.cq, r.p.cqOff.head) = head + 1
	return res, nil
}

func (r *ring) close() {
	for _, m := range [][]byte{r.sq, r.cq, r.es} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	unix.Close(r.fd)
}
