package bench

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Legacy ethtool "get" commands (linux/ethtool.h); each answers one
// offload flag through SIOCETHTOOL with a struct ethtool_value.
var ethtoolFlags = []struct {
	name string
	cmd  uint32
}{
	{"rx-checksum", 0x14}, {"tx-checksum", 0x16}, {"scatter-gather", 0x18},
	{"tso", 0x1e}, {"gso", 0x23}, {"gro", 0x2b},
}

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqData is struct ifreq with the union holding a pointer.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// offloads reads the offload flags of iface in the calling thread's
// namespace (nil if the device answers none).
func offloads(iface string) map[string]bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	out := map[string]bool{}
	for _, f := range ethtoolFlags {
		v := &ethtoolValue{cmd: f.cmd}
		ifr := &ifreqData{data: unsafe.Pointer(v)}
		copy(ifr.name[:unix.IFNAMSIZ-1], iface)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
		if errno == 0 {
			out[f.name] = v.data != 0
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
