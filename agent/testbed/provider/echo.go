package provider

import (
	"net"
	"time"
)

// echoIdle bounds how long an echo connection may stay idle.
const echoIdle = 10 * time.Second

func serveTCPEcho(l net.Listener, log *eventLog) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !isClosed(err) {
				log.errorf("tcp echo accept: %v", err)
			}
			return
		}
		log.add(Event{Kind: EvTCP, Net: "tcp", Src: c.RemoteAddr().String(), Dst: c.LocalAddr().String()})
		go func() {
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
		}()
	}
}

func serveUDPEcho(u *udpConn, log *eventLog) {
	buf := make([]byte, 64<<10)
	for {
		n, src, dst, err := u.read(buf)
		if err != nil {
			if !isClosed(err) {
				log.errorf("udp echo read: %v", err)
			}
			return
		}
		log.add(Event{Kind: EvUDP, Net: "udp", Src: src.String(), Dst: u.local(dst), Len: n})
		if err := u.write(buf[:n], src, dst); err != nil {
			log.errorf("udp echo reply to %s: %v", src, err)
		}
	}
}
