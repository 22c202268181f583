package apps

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

// namespaceSockets reads the TCP sockets of the namespace it names with
// sock_diag (NETLINK_SOCK_DIAG, inet_diag), from a thread in it.
type namespaceSockets string

// TCP states as inet_diag reports them (include/net/tcp_states.h).
const (
	tcpEstablished = 1
	tcpListen      = 10
)

// PeerOwner finds the far end of local→remote, the socket whose local
// address is remote and whose remote address is local, and:
//   - once a process accepted it (it has an inode), its uid is the
//     answer: the kernel gives an accepted socket its listener's uid, and
//     it is the socket the bytes will go to;
//   - before that (in a listener's queue), the kernel before 6.16 reports
//     uid 0 for it, so the answer is the listeners on remote's port: every
//     one of them (any address, either family: the one holding the
//     connection is among them, and only its owner can accept it) must
//     have the same uid.
//
// A far end that is not there, or not established, is an error.
func (ns namespaceSockets) PeerOwner(local, remote netip.AddrPort) (uint32, error) {
	var socks []*netlink.Socket
	err := netns.Do(string(ns), func() error {
		var err error
		socks, err = dumpTCP()
		return err
	})
	if err != nil {
		return 0, err
	}
	return peerOwner(socks, local, remote)
}

// dumpTCP lists the TCP sockets of both families, dumping again (up to 3
// times) when the kernel says a dump was interrupted.
func dumpTCP() ([]*netlink.Socket, error) {
	var err error
	for range 3 {
		var all []*netlink.Socket
		err = nil
		for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
			s, e := netlink.SocketDiagTCP(fam)
			if e != nil {
				err = e
				break
			}
			all = append(all, s...)
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			if err != nil {
				return nil, fmt.Errorf("sock_diag: %w", err)
			}
			return all, nil
		}
	}
	return nil, fmt.Errorf("sock_diag: %w", err)
}

func peerOwner(socks []*netlink.Socket, local, remote netip.AddrPort) (uint32, error) {
	local, remote = unmap(local), unmap(remote)
	var far *netlink.Socket
	for _, s := range socks {
		if s.State == tcpEstablished && addrPort(s.ID.Source, s.ID.SourcePort) == remote && addrPort(s.ID.Destination, s.ID.DestinationPort) == local {
			far = s
			break
		}
	}
	if far == nil {
		return 0, fmt.Errorf("no established socket in the namespace answers %v→%v (is the address outside the namespace?)", local, remote)
	}
	if far.INode != 0 {
		return far.UID, nil
	}
	var (
		uid   uint32
		found bool
	)
	for _, s := range socks {
		if s.State != tcpListen || s.ID.SourcePort != remote.Port() {
			continue
		}
		if found && s.UID != uid {
			return 0, fmt.Errorf("the listeners on port %d belong to uid %d and uid %d", remote.Port(), uid, s.UID)
		}
		uid, found = s.UID, true
	}
	if !found {
		return 0, fmt.Errorf("no listener on port %d holds the connection", remote.Port())
	}
	return uid, nil
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }
