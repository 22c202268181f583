package apps

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/user"
	"strconv"
)

// Owner is the user an application runs as (config's user): the agent
// sends a request only over a connection whose far end is a socket of
// that uid, so that a credential never reaches a listener another user
// (a confined process as nobody, say) bound on the application's port
// first.
type Owner struct {
	UID  uint32
	Name string // as configured: a user name, or the uid in digits
}

func (o Owner) String() string {
	if o.Name == "" || o.Name == strconv.FormatUint(uint64(o.UID), 10) {
		return fmt.Sprintf("uid %d", o.UID)
	}
	return fmt.Sprintf("%s (uid %d)", o.Name, o.UID)
}

// SocketOwners says who owns the far end of a TCP connection the agent
// made inside the namespace (in production sock_diag from a thread in
// it; a fake in the tests that run without root).
type SocketOwners interface {
	// PeerOwner is the uid of the process side of the connection
	// local→remote: the socket its listener accepted (authoritative once
	// a process accepted it), or else the listeners on remote's port, one
	// of which holds it in its queue. An error: no such socket in the
	// namespace, or the lookup failed; either way nothing is sent.
	PeerOwner(local, remote netip.AddrPort) (uint32, error)
}

// dialFunc is http.Transport's DialContext.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ownerCheckedDial wraps dial: once connected, it asks owners who owns
// the far end, and hands the connection over only if that is want; else
// it closes it before a byte of the request was written and returns an
// *OwnerError.
func ownerCheckedDial(dial dialFunc, want Owner, owners SocketOwners) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := checkOwner(c, want, owners); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

func checkOwner(c net.Conn, want Owner, owners SocketOwners) error {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return fmt.Errorf("%v: not a TCP connection: its owner cannot be checked: sent nothing", c.RemoteAddr())
	}
	r := remote.AddrPort()
	uid, err := owners.PeerOwner(local.AddrPort(), r)
	if err != nil {
		return fmt.Errorf("%v: check who listens: %w: sent nothing", r, err)
	}
	if uid != want.UID {
		return &OwnerError{Addr: r, UID: uid, Want: want}
	}
	return nil
}

// OwnerError is a connection refused because another user than the
// application's listens at its address.
type OwnerError struct {
	Addr netip.AddrPort
	UID  uint32 // the listening socket's
	Want Owner
}

func (e *OwnerError) Error() string {
	got := fmt.Sprintf("uid %d", e.UID)
	if u, err := user.LookupId(strconv.FormatUint(uint64(e.UID), 10)); err == nil {
		got += " (" + u.Username + ")"
	}
	return fmt.Sprintf("the listening socket at %v belongs to %s, not to %s: sent nothing (no credential goes to another user's listener)", e.Addr, got, e.Want)
}
