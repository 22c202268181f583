package natpmp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// Retransmission (RFC 6886 3.1): a request is sent again when no response
// came within 250 ms, then 500 ms, doubling. The RFC goes on for nine
// tries (over a minute); this client gives up after Tries sends, 3.75 s
// of silence (250+500+1000+2000 ms), and always as soon as ctx is done.
// Its caller retries on its own schedule.
const (
	Tries          = 4
	InitialTimeout = 250 * time.Millisecond
)

// Mapping is a port mapping as the gateway granted it.
type Mapping struct {
	Protocol Protocol
	// InternalPort is the gateway's answer: the requested port (ProtonVPN
	// answers 0 to a request for internal port 0).
	InternalPort uint16
	// ExternalPort is the port the gateway forwards to the client: the
	// one to give an application when the gateway chooses it (ProtonVPN
	// forwards public:ExternalPort to client:ExternalPort). 0 after a
	// deletion.
	ExternalPort uint16
	Lifetime     time.Duration // as granted; renew before it runs out
	Epoch        uint32        // the gateway's seconds since start of epoch
}

// Client talks NAT-PMP to one gateway. Requests are serialised (RFC 6886
// 3.1: one at a time); a Client is safe for concurrent use.
type Client struct {
	conn    net.Conn
	mu      sync.Mutex
	tries   int
	timeout time.Duration
}

// NewClient returns a client speaking over conn: a UDP socket connected
// to the gateway's port 5351, created by the caller (in the namespace and
// from the address the mappings are for). The client never closes it.
func NewClient(conn net.Conn) *Client {
	return &Client{conn: conn, tries: Tries, timeout: InitialTimeout}
}

// ExternalAddress asks the gateway for its external IPv4 address (RFC
// 6886 3.2).
func (c *Client) ExternalAddress(ctx context.Context) (addr netip.Addr, epoch uint32, err error) {
	r, err := c.exchange(ctx, "address", addressRequest(), func(r response) bool {
		return r.Op == opResponse+opAddress
	})
	if err != nil {
		return netip.Addr{}, 0, err
	}
	return r.Addr, r.Epoch, nil
}

// Map requests (or renews) a mapping of external port to internal port
// for lifetime (RFC 6886 3.3); the gateway may grant another external
// port and a shorter lifetime. Lifetime 0 deletes the mapping of internal
// (RFC 6886 3.4; with internal 0: every mapping of the client for p); the
// external port is then sent as 0. A lifetime under a second that is not
// 0 is sent as one second.
//
// ProtonVPN: Map(ctx, UDP, 0, 1, 60*time.Second), the same for TCP, every
// 45 s or so; the answer's ExternalPort is the forwarded port.
func (c *Client) Map(ctx context.Context, p Protocol, internal, external uint16, lifetime time.Duration) (Mapping, error) {
	verb := "map"
	if lifetime == 0 {
		verb, external = "unmap", 0
	}
	op := fmt.Sprintf("%s %s %d", verb, p, internal)
	if p != UDP && p != TCP {
		return Mapping{}, fmt.Errorf("natpmp %s: unknown protocol", op)
	}
	secs, err := seconds(lifetime)
	if err != nil {
		return Mapping{}, fmt.Errorf("natpmp %s: %w", op, err)
	}
	r, err := c.exchange(ctx, op, mappingRequest(p, internal, external, secs), func(r response) bool {
		// A late answer to an earlier request for another port is not
		// this one's; a gateway may fill in a port asked for as 0.
		return r.Op == opResponse+uint8(p) && (!r.full || internal == 0 || r.Internal == internal)
	})
	if err != nil {
		return Mapping{}, err
	}
	if lifetime != 0 && (r.External == 0 || r.Lifetime == 0) {
		return Mapping{}, fmt.Errorf("natpmp %s: gateway granted external port %d for %d s", op, r.External, r.Lifetime)
	}
	return Mapping{Protocol: p, InternalPort: r.Internal, ExternalPort: r.External,
		Lifetime: time.Duration(r.Lifetime) * time.Second, Epoch: r.Epoch}, nil
}

// seconds converts a requested lifetime for the wire.
func seconds(d time.Duration) (uint32, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("negative lifetime %v", d)
	case d == 0:
		return 0, nil
	case d > time.Duration(math.MaxUint32)*time.Second:
		return 0, fmt.Errorf("lifetime %v is over 2^32 s", d)
	}
	return uint32((d + time.Second - 1) / time.Second), nil
}

// exchange sends req until a datagram that match accepts arrives, the
// tries run out or ctx is done. Datagrams that are no response, or not
// this request's, are dropped.
func (c *Client) exchange(ctx context.Context, op string, req []byte, match func(response) bool) (response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dl := &deadline{conn: c.conn}
	stop := context.AfterFunc(ctx, dl.cancel)
	defer stop()
	defer c.conn.SetReadDeadline(time.Time{})
	buf := make([]byte, 64)
	wait, total := c.timeout, time.Duration(0)
	for range c.tries {
		if err := ctx.Err(); err != nil {
			return response{}, fmt.Errorf("natpmp %s: %w", op, err)
		}
		if _, err := c.conn.Write(req); err != nil {
			return response{}, fmt.Errorf("natpmp %s: send: %w", op, err)
		}
		until := time.Now().Add(wait)
		ctxDeadline, hasDeadline := ctx.Deadline()
		if hasDeadline && ctxDeadline.Before(until) {
			until = ctxDeadline
		}
		if !dl.set(until) {
			return response{}, fmt.Errorf("natpmp %s: %w", op, ctx.Err())
		}
		for {
			n, err := c.conn.Read(buf)
			if err != nil {
				if ctx.Err() != nil {
					return response{}, fmt.Errorf("natpmp %s: %w", op, ctx.Err())
				}
				if hasDeadline && !time.Now().Before(ctxDeadline) && errors.Is(err, os.ErrDeadlineExceeded) {
					// ctx's own timer may not have fired yet
					return response{}, fmt.Errorf("natpmp %s: %w", op, context.DeadlineExceeded)
				}
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				return response{}, fmt.Errorf("natpmp %s: receive: %w", op, err)
			}
			r, err := decodeResponse(buf[:n])
			if err != nil || !match(r) {
				continue
			}
			if r.Result != 0 {
				return r, &ResultError{Op: op, Code: r.Result}
			}
			return r, nil
		}
		total += wait
		wait *= 2
	}
	return response{}, fmt.Errorf("natpmp %s: no response from the gateway after %d tries (%v)", op, c.tries, total)
}

// deadline sets a connection's read deadline until cancelled; cancel
// makes the pending read return at once, and no later set undoes it.
type deadline struct {
	mu        sync.Mutex
	conn      net.Conn
	cancelled bool
}

func (d *deadline) set(t time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancelled {
		return false
	}
	d.conn.SetReadDeadline(t)
	return true
}

func (d *deadline) cancel() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancelled = true
	d.conn.SetReadDeadline(time.Now())
}

// Restarted reports whether a gateway lost its mappings between two
// responses (RFC 6886 3.6): the epoch received at `at` is more than 2 s
// below the previous one (received at prevAt) plus 7/8 of the time that
// passed on the client's clock. The caller then maps everything again.
func Restarted(prevEpoch uint32, prevAt time.Time, epoch uint32, at time.Time) bool {
	elapsed := at.Sub(prevAt)
	if elapsed < 0 {
		elapsed = 0
	}
	expected := float64(prevEpoch) + elapsed.Seconds()*7/8
	return float64(epoch) < expected-2
}
