package testbed

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
)

// DialIn dials from inside namespace ns: the socket is created on a
// thread in ns, so it stays there for its whole life.
func DialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := Do(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Resolver returns a resolver that asks the first nameserver of the
// resolv.conf at path, over sockets created inside namespace ns (Go's
// resolver runs on goroutines of its own, so its Dial is what must enter
// the namespace).
func Resolver(ns, path string) (*net.Resolver, string, error) {
	server, err := nameserver(path)
	if err != nil {
		return nil, "", err
	}
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return DialIn(ctx, ns, network, net.JoinHostPort(server, "53"))
	}
	return &net.Resolver{PreferGo: true, Dial: dial}, server, nil
}

// nameserver returns the first nameserver of a resolv.conf.
func nameserver(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read resolver config: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s: no nameserver", path)
}
