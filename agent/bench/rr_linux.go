package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// rrMsg is the request and response size of the request/response probe
// (TCP_RR-style: one small request, one small response, repeated).
const rrMsg = 64

// rrServer echoes 64-byte messages; it listens in the provider namespace.
type rrServer struct{ ln net.Listener }

func startRRServer(th *testbed.Thread) (*rrServer, error) {
	s := &rrServer{}
	err := th.Do(func() error {
		ln, err := net.Listen("tcp4", "0.0.0.0:"+strconv.Itoa(rrPort))
		if err != nil {
			return fmt.Errorf("request/response server: %w", err)
		}
		s.ln = ln
		return nil
	})
	if err != nil {
		return nil, err
	}
	go s.serve()
	return s, nil
}

func (s *rrServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, rrMsg)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

func (s *rrServer) Close() error { return s.ln.Close() }

// runRR connects from th to addr and runs transactions for warm+dur; only
// those after warm are recorded.
func runRR(ctx context.Context, th *testbed.Thread, addr string, warm, dur time.Duration) (*RRResult, error) {
	var c net.Conn
	err := th.Do(func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		var err error
		c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort(addr, strconv.Itoa(rrPort)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("request/response: connect %s: %w", addr, err)
	}
	defer c.Close()
	req, resp := make([]byte, rrMsg), make([]byte, rrMsg)
	start := time.Now()
	measureFrom, end := start.Add(warm), start.Add(warm+dur)
	c.SetDeadline(end.Add(5 * time.Second))
	var us []float64
	for ctx.Err() == nil {
		t0 := time.Now()
		if t0.After(end) {
			break
		}
		if _, err := c.Write(req); err != nil {
			return nil, fmt.Errorf("request/response: write: %w", err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return nil, fmt.Errorf("request/response: read: %w", err)
		}
		if t0.After(measureFrom) {
			us = append(us, float64(time.Since(t0))/1e3)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if len(us) == 0 {
		return nil, errors.New("request/response: no transactions completed")
	}
	slices.Sort(us)
	return &RRResult{
		MsgBytes: rrMsg, Transactions: len(us), PerSecond: float64(len(us)) / dur.Seconds(),
		P50us: Percentile(us, 50), P99us: Percentile(us, 99), MaxUs: us[len(us)-1],
	}, nil
}
