package health

import (
	"errors"
	"fmt"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.org/x/sys/unix"
)

// rtGroups are the rtnetlink multicast groups whose events can change
// what inspectLink reads: links (the tunnel's presence, its up flag, its
// MTU), addresses, routes and (sidecar mode's policy routing) rules, IPv4
// and IPv6.
const rtGroups = 1<<(unix.RTNLGRP_LINK-1) |
	1<<(unix.RTNLGRP_IPV4_IFADDR-1) | 1<<(unix.RTNLGRP_IPV4_ROUTE-1) | 1<<(unix.RTNLGRP_IPV4_RULE-1) |
	1<<(unix.RTNLGRP_IPV6_IFADDR-1) | 1<<(unix.RTNLGRP_IPV6_ROUTE-1) | 1<<(unix.RTNLGRP_IPV6_RULE-1)

// rtNexthop is the group of nexthop objects (Linux 5.3): a route can name
// one (`ip route add default nhid 7`), and deleting the object removes
// the route with a nexthop event only, no route event. It is joined when
// the kernel has it; an older kernel refuses it (EINVAL), and its routes
// cannot name nexthop objects anyway.
const rtNexthop = unix.RTNLGRP_NEXTHOP

// rtWatch counts the rtnetlink events of one namespace: a socket opened
// inside it and subscribed to rtGroups (and rtNexthop, when the kernel
// has it), drained without blocking at each Read. Its reading is a Gen whose ID moves whenever any event arrived
// since the last Read, so a Gate can skip reading the link and routes
// back when none did. A lost event (the socket's buffer overflowed:
// ENOBUFS) or any other error is an error: the caller reads in full. The
// socket pins the namespace it was opened in; a name that now names
// another namespace opens a new one (and reads as another Ident).
type rtWatch struct {
	name string
	fd   int // -1: closed
	ino  uint64
	n    uint32
	buf  []byte
	// optional are groups joined if the kernel accepts them (beyond
	// rtGroups' bitmask); joined, those it did at the last open.
	optional, joined []int
}

func newRTWatch(name string) *rtWatch {
	return &rtWatch{name: name, fd: -1, optional: []int{rtNexthop}}
}

func (w *rtWatch) Read() (policy.Gen, error) {
	g, err := w.read()
	if err != nil {
		w.Close()
		return policy.Gen{}, fmt.Errorf("rtnetlink events of %s: %w", w.name, err)
	}
	return g, nil
}

func (w *rtWatch) read() (policy.Gen, error) {
	var st unix.Stat_t
	if err := unix.Stat(netns.Path(w.name), &st); err != nil {
		return policy.Gen{}, err
	}
	if w.fd >= 0 && st.Ino != w.ino {
		w.Close()
	}
	if w.fd < 0 {
		if err := w.open(); err != nil {
			return policy.Gen{}, err
		}
	}
	events, err := w.drain()
	if err != nil {
		return policy.Gen{}, err
	}
	if events {
		w.n++
	}
	return policy.Gen{Ident: w.ino, ID: w.n}, nil
}

// open makes the subscribed socket inside the namespace and records the
// inode of the namespace it was made in.
func (w *rtWatch) open() error {
	var fd int
	var ino uint64
	err := netns.Do(w.name, func() error {
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			return err
		}
		s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: rtGroups}); err != nil {
			unix.Close(s)
			return err
		}
		fd, ino = s, st.Ino
		return nil
	})
	if err != nil {
		return err
	}
	w.joined = w.joined[:0]
	for _, g := range w.optional {
		// Membership is the socket's, wherever it is joined from.
		if unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, g) == nil {
			w.joined = append(w.joined, g)
		}
	}
	w.fd, w.ino, w.n = fd, ino, w.n+1 // a new socket: events before it are unknown
	return nil
}

// drain reads every pending event without blocking and says whether
// there was any.
func (w *rtWatch) drain() (bool, error) {
	if w.buf == nil {
		w.buf = make([]byte, 16<<10)
	}
	any := false
	for {
		_, _, err := unix.Recvfrom(w.fd, w.buf, unix.MSG_DONTWAIT)
		switch {
		case err == nil:
			any = true
		case errors.Is(err, unix.EAGAIN):
			return any, nil
		case errors.Is(err, unix.EINTR):
		default:
			return any, err // ENOBUFS: events were lost
		}
	}
}

func (w *rtWatch) Close() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}
