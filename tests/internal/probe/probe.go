// Package probe tries to reach things from inside a network namespace and
// reports what happened in a structured Result. Probes are short (Timeout,
// 1 s by default) so a matrix of them runs fast; run independent probes
// concurrently with All.
//
// A probe result alone is weak evidence of blocking (a remote RST also
// reads as "refused"); leak tests pair probes with captures (package
// observe) and decoy logs.
package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Timeout bounds each network probe.
var Timeout = time.Second

// Outcome classifies a probe.
type Outcome string

const (
	// Reached: the target answered (connected, echoed, resolved, replied).
	Reached Outcome = "reached"
	// Sent: a fire-and-forget datagram left the socket (no answer expected).
	Sent Outcome = "sent"
	// Rejected: refused or unreachable, locally (policy reject, EPERM from
	// an output drop, no route) or by an ICMP error from the path.
	Rejected Outcome = "rejected"
	// Timeout: no answer within Timeout.
	TimedOut Outcome = "timeout"
	// Failed: the probe itself could not run (namespace missing, bad input,
	// unexpected answer).
	Failed Outcome = "error"
)

// Result is what a probe found.
type Result struct {
	Probe   string // e.g. "tcp 203.0.113.10:80 from vt1a2b3cc"
	Outcome Outcome
	Errno   syscall.Errno // the errno behind Rejected/Failed, if any
	Err     error
	Answer  string       // echo payload, DNS rcode, command output
	Addrs   []netip.Addr // DNS answers, getent addresses
	RTT     time.Duration
}

// Reached reports whether the target answered.
func (r Result) Reached() bool { return r.Outcome == Reached }

func (r Result) String() string {
	s := fmt.Sprintf("%s: %s", r.Probe, r.Outcome)
	if r.Err != nil {
		s += " (" + r.Err.Error() + ")"
	}
	if len(r.Addrs) > 0 {
		s += fmt.Sprintf(" addrs=%v", r.Addrs)
	}
	return s
}

// finish classifies err into r.
func (r Result) finish(start time.Time, err error) Result {
	r.RTT = time.Since(start)
	if err == nil {
		if r.Outcome == "" {
			r.Outcome = Reached
		}
		return r
	}
	r.Err = err
	var errno syscall.Errno
	if errors.As(err, &errno) {
		r.Errno = errno
	}
	var ne net.Error
	switch {
	case r.Outcome != "":
		// already classified by the probe
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		r.Outcome = TimedOut
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EPERM),
		errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EADDRNOTAVAIL):
		r.Outcome = Rejected
	default:
		r.Outcome = Failed
	}
	return r
}

// in runs fn inside namespace ns (Here: where the caller is); a failure
// to enter is a Failed result.
func in(ns, desc string, fn func() Result) Result {
	var r Result
	if ns == Here {
		r = fn()
	} else if err := InNetns(ns, func() error { r = fn(); return nil }); err != nil {
		r = Result{Outcome: Failed, Err: err}
	}
	r.Probe = desc + " from " + ns
	return r
}

func deadline() time.Time { return time.Now().Add(Timeout) }

// TCP connects to dst and closes.
func TCP(ns string, dst netip.AddrPort) Result {
	return in(ns, "tcp "+dst.String(), func() Result {
		start := time.Now()
		c, err := (&net.Dialer{Timeout: Timeout}).Dial("tcp", dst.String())
		if err == nil {
			c.Close()
		}
		return Result{}.finish(start, err)
	})
}

// TCPEcho connects to dst, sends payload and expects it echoed back.
func TCPEcho(ns string, dst netip.AddrPort, payload []byte) Result {
	return in(ns, "tcp-echo "+dst.String(), func() Result {
		start := time.Now()
		c, err := (&net.Dialer{Timeout: Timeout}).Dial("tcp", dst.String())
		if err != nil {
			return Result{}.finish(start, err)
		}
		defer c.Close()
		c.SetDeadline(deadline())
		return echo(c, payload, start)
	})
}

// UDPEcho sends payload to dst and expects it echoed back.
func UDPEcho(ns string, dst netip.AddrPort, payload []byte) Result {
	return in(ns, "udp-echo "+dst.String(), func() Result {
		start := time.Now()
		c, err := net.Dial("udp", dst.String())
		if err != nil {
			return Result{}.finish(start, err)
		}
		defer c.Close()
		c.SetDeadline(deadline())
		return echo(c, payload, start)
	})
}

func echo(c net.Conn, payload []byte, start time.Time) Result {
	if _, err := c.Write(payload); err != nil {
		return Result{}.finish(start, err)
	}
	buf := make([]byte, len(payload)+64)
	got := 0
	for got < len(payload) {
		n, err := c.Read(buf[got:])
		got += n
		if err != nil {
			return Result{Answer: string(buf[:got])}.finish(start, err)
		}
		if _, ok := c.(*net.UDPConn); ok {
			break
		}
	}
	r := Result{Answer: string(buf[:got])}
	if r.Answer != string(payload) {
		r.Outcome = Failed
		return r.finish(start, fmt.Errorf("echo mismatch: sent %q, got %q", payload, r.Answer))
	}
	return r.finish(start, nil)
}

// UDPSend sends one datagram to dst without expecting an answer (for
// multicast, broadcast, positive-control markers). Sent means the kernel
// accepted it; whether it left is for a capture to say.
func UDPSend(ns string, dst netip.AddrPort, payload []byte) Result {
	return in(ns, "udp-send "+dst.String(), func() Result {
		start := time.Now()
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
			})
			return errors.Join(err, serr)
		}}
		network := "udp4"
		if dst.Addr().Is6() {
			network = "udp6"
		}
		pc, err := lc.ListenPacket(context.Background(), network, ":0")
		if err != nil {
			return Result{}.finish(start, err)
		}
		defer pc.Close()
		if _, err := pc.WriteTo(payload, net.UDPAddrFromAddrPort(dst)); err != nil {
			return Result{}.finish(start, err)
		}
		return Result{Outcome: Sent}.finish(start, nil)
	})
}

// All runs probes concurrently and returns their results in order.
func All(probes ...func() Result) []Result {
	out := make([]Result, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = p() }()
	}
	wg.Wait()
	return out
}

// Summary formats results one per line.
func Summary(rs []Result) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString("\t" + r.String() + "\n")
	}
	return b.String()
}

// TCPFrom connects from local to dst and closes. A zero port in local lets
// the kernel pick one; an invalid address binds the wildcard. The socket
// sets SO_REUSEADDR and SO_REUSEPORT, so a fixed local port can be used
// again by the next probe, and bound next to a listener on the same port
// that also set SO_REUSEPORT (e.g. to send from a published service's
// port, the way a reply would).
func TCPFrom(ns string, local, dst netip.AddrPort) Result {
	return in(ns, "tcp "+local.String()+" -> "+dst.String(), func() Result {
		start := time.Now()
		d := net.Dialer{Timeout: Timeout, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = errors.Join(
					syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1),
					syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1))
			})
			return errors.Join(err, serr)
		}}
		if local.Addr().IsValid() || local.Port() != 0 {
			d.LocalAddr = net.TCPAddrFromAddrPort(local)
		}
		c, err := d.Dial("tcp", dst.String())
		if err == nil {
			c.Close()
		}
		return Result{}.finish(start, err)
	})
}

// Marked is TCP (op OpTCP) or UDPSend (op OpUDPSend) from a socket marked
// mark with SO_MARK, bound to local if it is valid.
func Marked(ns string, op Op, local, dst netip.AddrPort, payload []byte, mark uint32) Result {
	desc := fmt.Sprintf("%s %s mark %#x", op, dst, mark)
	return in(ns, desc, func() Result {
		start := time.Now()
		// A refused SO_MARK is Failed, not Rejected: the probe could not
		// pass as marked, so it proves nothing.
		var markErr error
		control := func(_, _ string, rc syscall.RawConn) error {
			err := rc.Control(func(fd uintptr) {
				markErr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, int(mark))
			})
			if markErr != nil {
				markErr = fmt.Errorf("SO_MARK: %w", markErr)
				return markErr
			}
			return err
		}
		d := net.Dialer{Timeout: Timeout, Control: control}
		switch op {
		case OpTCP:
			if local.IsValid() {
				d.LocalAddr = net.TCPAddrFromAddrPort(local)
			}
			c, err := d.Dial("tcp", dst.String())
			if err == nil {
				c.Close()
			}
			if markErr != nil {
				return Result{Outcome: Failed}.finish(start, markErr)
			}
			return Result{}.finish(start, err)
		case OpUDPSend:
			if local.IsValid() {
				d.LocalAddr = net.UDPAddrFromAddrPort(local)
			}
			c, err := d.Dial("udp", dst.String())
			if err != nil {
				return Result{Outcome: Failed}.finish(start, err)
			}
			defer c.Close()
			if _, err := c.Write(payload); err != nil {
				return Result{}.finish(start, err)
			}
			return Result{Outcome: Sent}.finish(start, nil)
		}
		return Result{Outcome: Failed}.finish(start, fmt.Errorf("probe %q takes no mark", op))
	})
}
