package metrics

import (
	"net"
	"sync"
)

// MaxConns bounds the connections the metrics server holds at once. A
// scraper needs one or two; the bound keeps a flood of connections (any
// local user may open thousands) from taking the agent's file
// descriptors and memory, which its watchdog, NAT-PMP renewals and
// health checks need. Connections beyond it wait in the kernel's accept
// queue, holding no descriptor of the agent's, until a slot frees (the
// server's short timeouts free them).
const MaxConns = 32

// limitListener accepts at most n connections at once: Accept waits for
// a slot before it takes the next connection from the kernel, and a
// slot frees when an accepted connection is closed.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func limit(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, free: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn frees its slot on its first Close.
type limitConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
