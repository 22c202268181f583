package wireguard

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// capNetAdmin is CAP_NET_ADMIN's bit in /proc/PID/status's CapEff.
const capNetAdmin = 12

// nsIdent identifies a namespace by its nsfs inode.
type nsIdent struct{ dev, ino uint64 }

func nsOf(path string) (nsIdent, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsIdent{}, err
	}
	return nsIdent{uint64(st.Dev), st.Ino}, nil
}

// uapiGuard decides who may use the UAPI socket. The socket file is
// root's and 0700, but root inside the confined namespace (even with an
// empty capability bounding set) is uid 0 too: it could read the private
// key and point the host-side socket anywhere. Only a client in the
// agent's own (host) network and user namespaces that holds CAP_NET_ADMIN
// there may configure the tunnel, as with kernel WireGuard.
//
// The network namespace is the client socket's own: a unix stream
// connection's accepted socket is born in the connecting socket's
// namespace, which SO_NETNS_COOKIE reads. That is exact where the
// process's /proc entry is not (it shows the thread group leader's
// namespace, not the connecting thread's). Kernels before 5.14 lack the
// option; there the leader's namespace is compared.
type uapiGuard struct {
	cookie    uint64 // SO_NETNS_COOKIE of the host namespace; 0: unsupported
	net, user nsIdent
}

// newUAPIGuard records the calling thread's namespaces: call it from a
// host-namespace thread.
func newUAPIGuard() (*uapiGuard, error) {
	n, err := nsOf("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("read own network namespace: %w", err)
	}
	u, err := nsOf("/proc/thread-self/ns/user")
	if err != nil {
		return nil, fmt.Errorf("read own user namespace: %w", err)
	}
	g := &uapiGuard{net: n, user: u}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	if c, err := netnsCookie(fd); err == nil {
		g.cookie = c
	}
	return g, nil
}

func netnsCookie(fd int) (uint64, error) {
	v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, soNetnsCookie)
	return v, err
}

// soNetnsCookie is SO_NETNS_COOKIE (Linux 5.14), the same on every
// architecture but not in this x/sys release for all of them.
const soNetnsCookie = 71

// allow returns nil if the process at the other end of c may use the
// socket, or why not.
func (g *uapiGuard) allow(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr, kerr error
	var cookie uint64
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		cookie, kerr = netnsCookie(int(fd))
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	if g.cookie != 0 {
		if kerr != nil {
			return fmt.Errorf("SO_NETNS_COOKIE: %w", kerr)
		}
		if cookie != g.cookie {
			return fmt.Errorf("pid %d connected from another network namespace", cred.Pid)
		}
		return g.allowPID(int(cred.Pid), false)
	}
	return g.allowPID(int(cred.Pid), true)
}

// allowPID checks pid's user namespace and capabilities and, with
// checkNet, its (leader thread's) network namespace.
func (g *uapiGuard) allowPID(pid int, checkNet bool) error {
	proc := "/proc/" + strconv.Itoa(pid)
	if checkNet {
		n, err := nsOf(proc + "/ns/net")
		if err != nil {
			return fmt.Errorf("pid %d: %w", pid, err)
		}
		if n != g.net {
			return fmt.Errorf("pid %d is in another network namespace", pid)
		}
	}
	u, err := nsOf(proc + "/ns/user")
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	if u != g.user {
		return fmt.Errorf("pid %d is in another user namespace", pid)
	}
	capEff, err := effectiveCaps(proc + "/status")
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	if capEff&(1<<capNetAdmin) == 0 {
		return fmt.Errorf("pid %d lacks CAP_NET_ADMIN", pid)
	}
	return nil
}

func effectiveCaps(status string) (uint64, error) {
	f, err := os.Open(status)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff in %s", status)
}
