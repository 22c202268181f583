package provider

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// echoIdle bounds how long an echo connection may stay idle.
const echoIdle = 10 * time.Second

func serveTCPEcho(l net.Listener, log *eventLog) {
	acceptEach(l, "tcp echo", "", log, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 32<<10)
		for {
			c.SetDeadline(time.Now().Add(echoIdle))
			n, err := c.Read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil { // io.EOF or deadline: done
				return
			}
		}
	})
}

func serveUDPEcho(u *udpConn, log *eventLog) {
	readEach(u, "udp echo", log, func(b []byte, src net.Addr, dst netip.Addr) {
		log.add(Event{Kind: EvUDP, Net: "udp", Src: src.String(), Dst: u.local(dst), Len: len(b)})
		if err := u.write(b, src, dst); err != nil {
			log.errorf("udp echo reply to %s: %v", src, err)
		}
	})
}

// acceptEach accepts connections on l until it is closed, logs each as a
// TCP hit (with msg) and handles it on a goroutine of its own.
func acceptEach(l net.Listener, what, msg string, log *eventLog, handle func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !isClosed(err) {
				log.errorf("%s accept: %v", what, err)
			}
			return
		}
		log.add(Event{Kind: EvTCP, Net: "tcp", Src: c.RemoteAddr().String(), Dst: c.LocalAddr().String(), Msg: msg})
		go handle(c)
	}
}

// readEach reads datagrams from u until it is closed and handles each in
// turn, with its sender and the local address it was sent to.
func readEach(u *udpConn, what string, log *eventLog, handle func(b []byte, src net.Addr, dst netip.Addr)) {
	buf := make([]byte, 64<<10)
	for {
		n, src, dst, err := u.read(buf)
		if err != nil {
			if !isClosed(err) {
				log.errorf("%s read: %v", what, err)
			}
			return
		}
		handle(buf[:n], src, dst)
	}
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed)
}
