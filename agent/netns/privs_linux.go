package netns

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Credential is who a command runs as under Exec.
type Credential struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups
}

// boundingKept is the one capability left in the bounding set. The kernel
// refuses to execute a program whose file capabilities the bounding set
// cannot grant (EPERM, "126"), and Debian's ping carries cap_net_raw=ep;
// under no_new_privs, with no permitted capability, such a program is
// granted nothing (its permitted set is cut to the caller's, empty), so ping
// runs unprivileged and uses its ICMP echo socket (ping_group_range).
const boundingKept = unix.CAP_NET_RAW

// dropPrivileges makes the calling thread, which is about to execve, an
// unprivileged user that cannot regain anything: no supplementary groups
// but the user's, the user's gid and uid, no capability (a bounding set of
// boundingKept alone, which nothing can grant it), no inheritable or
// ambient capabilities, and no_new_privs (setuid binaries and file
// capabilities grant nothing). Called as root, on a locked thread; raw
// per-thread system calls, since execve keeps only this thread.
func dropPrivileges(c *Credential) error {
	// The bounding set can only be emptied while CAP_SETPCAP is held.
	for cp := 0; cp <= lastCap(); cp++ {
		if cp == boundingKept {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(cp), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d from the bounding set: %w", cp, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	groups := c.Groups
	if len(groups) == 0 {
		groups = []uint32{c.GID}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(c.GID), uintptr(c.GID), uintptr(c.GID)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", c.GID, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(c.UID), uintptr(c.UID), uintptr(c.UID)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", c.UID, e)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	runtime.KeepAlive(groups)
	return nil
}

// lastCap is the highest capability this kernel knows.
func lastCap() int {
	n := 40 // CAP_CHECKPOINT_RESTORE, Linux 5.9; higher numbers give EINVAL
	if b, err := readSmall("/proc/sys/kernel/cap_last_cap"); err == nil {
		fmt.Sscan(string(b), &n)
	}
	return n
}
