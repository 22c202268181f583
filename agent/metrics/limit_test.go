package metrics

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// accepted dials n connections to ln's address, accepts from ln (limited
// or not) in the background, and returns how many it has accepted (as a
// function: it goes on accepting) and the first ones.
func accepted(t *testing.T, ln net.Listener, n int) (func() int, []net.Conn) {
	t.Helper()
	var count atomic.Int32
	var mu sync.Mutex
	var got []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, c)
			mu.Unlock()
			count.Add(1)
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	return func() int { return int(count.Load()) }, append([]net.Conn(nil), got...)
}

// Issue 20 finding 6: the limit holds N of N+k connections; closing one
// lets the next in. Positive control: unlimited, all N+k are accepted.
func TestLimitListener(t *testing.T) {
	const n, k = 4, 6
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limit(raw, n)
	defer ln.Close()
	count, conns := accepted(t, ln, n+k)
	if got := count(); got != n {
		t.Fatalf("limited to %d: %d of %d connections accepted", n, got, n+k)
	}
	conns[0].Close()
	conns[0].Close() // a second close frees nothing more
	time.Sleep(200 * time.Millisecond)
	if got := count(); got != n+1 {
		t.Errorf("after one close: %d accepted, want %d", got, n+1)
	}

	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if count, _ := accepted(t, plain, n+k); count() != n+k {
		t.Errorf("control, unlimited: %d of %d accepted", count(), n+k)
	}
}

// A closed limited listener's Accept returns at once, even while every
// slot is taken (the server's Close must not hang).
func TestLimitListenerClose(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limit(raw, 1)
	accepted(t, ln, 2)
	errc := make(chan error, 1)
	go func() { _, err := ln.Accept(); errc <- err }()
	ln.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Accept still waits for a slot after Close")
	}
}

// closedBy counts the connections the server has closed within d: a
// read that ends (EOF or reset) rather than time out.
func closedBy(conns []net.Conn, d time.Duration) int {
	var n atomic.Int32
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(d))
			_, err := c.Read(make([]byte, 1))
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(n.Load())
}

// The metrics server holds at most MaxConns connections, and closes one
// that sends nothing within readHeaderTimeout: of a flood of idle
// connections, exactly MaxConns are taken (and closed) in the first
// timeout; the rest wait in the kernel's queue, costing the agent no
// descriptor. Positive control: the same server without the bound takes
// (and closes) them all.
func TestServerBoundsConnections(t *testing.T) {
	t.Parallel()
	const flood = MaxConns + 40
	s, _ := fakeSpec(t)
	h := New(s).Handler(nil)
	l := &config.Listen{Network: "tcp", Address: "127.0.0.1:0"}
	for _, bounded := range []bool{true, false} {
		t.Run(map[bool]string{true: "bounded", false: "control-unbounded"}[bounded], func(t *testing.T) {
			t.Parallel()
			var srv *Server
			if bounded {
				var err error
				if srv, err = Listen(l, h, nil); err != nil {
					t.Fatal(err)
				}
			} else {
				ln, err := net.Listen("tcp", l.Address)
				if err != nil {
					t.Fatal(err)
				}
				srv = serve(l, ln, h, nil)
			}
			defer srv.Close()
			conns := make([]net.Conn, flood)
			for i := range conns {
				c, err := net.Dial("tcp", srv.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				conns[i] = c
			}
			got := closedBy(conns, readHeaderTimeout+time.Second)
			want := MaxConns
			if !bounded {
				want = flood
			}
			if got != want {
				t.Errorf("%d of %d idle connections closed within %v, want %d", got, flood, readHeaderTimeout+time.Second, want)
			}
		})
	}
}
