package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Here, as a namespace name, runs a probe in the caller's own network
// namespace: tests/cmd/netprobe uses it inside a container, which podman
// has already put in the namespace to test.
const Here = "(this namespace)"

// Op names a probe function.
type Op string

// The probe functions a Spec can name.
const (
	OpTCP     Op = "tcp"      // TCP
	OpTCPEcho Op = "tcp-echo" // TCPEcho
	OpTCPFrom Op = "tcp-from" // TCPFrom (Local)
	OpUDPEcho Op = "udp-echo" // UDPEcho
	OpUDPSend Op = "udp-send" // UDPSend
	OpPing    Op = "ping"     // Ping (the address of Dst)
	OpDNS     Op = "dns"      // DNS (Network, Name, QType)
)

// Spec is one probe as data, so that the same probe runs in a namespace
// from this process (Run) or in another process, e.g. tests/cmd/netprobe
// inside a container (the leak matrix's rows are Specs).
type Spec struct {
	Op      Op              `json:"op"`
	Dst     netip.AddrPort  `json:"dst"`
	Local   netip.AddrPort  `json:"local,omitzero"`
	Network string          `json:"network,omitempty"`
	Name    string          `json:"name,omitempty"`
	QType   dnsmessage.Type `json:"qtype,omitempty"`
	Payload []byte          `json:"payload,omitempty"`
	// Mark, if set, is put on the probe's socket with SO_MARK (needs
	// CAP_NET_ADMIN or, since Linux 5.17, CAP_NET_RAW): an app passing as
	// a process whose packets the kill switch lets out by their mark. Only
	// OpTCP and OpUDPSend take a mark (and then Local, if valid).
	Mark uint32 `json:"mark,omitempty"`
}

// Run runs the probe from namespace ns (Here: the caller's own).
func (s Spec) Run(ns string) Result {
	if s.Mark != 0 {
		return Marked(ns, s.Op, s.Local, s.Dst, s.Payload, s.Mark)
	}
	switch s.Op {
	case OpTCP:
		return TCP(ns, s.Dst)
	case OpTCPEcho:
		return TCPEcho(ns, s.Dst, s.Payload)
	case OpTCPFrom:
		return TCPFrom(ns, s.Local, s.Dst)
	case OpUDPEcho:
		return UDPEcho(ns, s.Dst, s.Payload)
	case OpUDPSend:
		return UDPSend(ns, s.Dst, s.Payload)
	case OpPing:
		return Ping(ns, s.Dst.Addr())
	case OpDNS:
		return DNS(ns, s.Dst, s.Network, s.Name, s.QType)
	}
	return Result{Probe: fmt.Sprintf("%q from %s", s.Op, ns), Outcome: Failed, Err: fmt.Errorf("unknown probe %q", s.Op)}
}

// RunAll runs specs from namespace ns (Here: the caller's own),
// concurrently, and returns their results in order.
func RunAll(ns string, specs ...Spec) []Result {
	fns := make([]func() Result, len(specs))
	for i, s := range specs {
		fns[i] = func() Result { return s.Run(ns) }
	}
	return All(fns...)
}

// wireResult is a Result in JSON (Err as its text).
type wireResult struct {
	Probe   string        `json:"probe"`
	Outcome Outcome       `json:"outcome"`
	Errno   syscall.Errno `json:"errno,omitempty"`
	Err     string        `json:"err,omitempty"`
	Answer  string        `json:"answer,omitempty"`
	Addrs   []netip.Addr  `json:"addrs,omitempty"`
	RTT     time.Duration `json:"rtt"`
}

// MarshalJSON encodes r with its error as text.
func (r Result) MarshalJSON() ([]byte, error) {
	w := wireResult{Probe: r.Probe, Outcome: r.Outcome, Errno: r.Errno, Answer: r.Answer, Addrs: r.Addrs, RTT: r.RTT}
	if r.Err != nil {
		w.Err = r.Err.Error()
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (r *Result) UnmarshalJSON(b []byte) error {
	var w wireResult
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Result{Probe: w.Probe, Outcome: w.Outcome, Errno: w.Errno, Answer: w.Answer, Addrs: w.Addrs, RTT: w.RTT}
	if w.Err != "" {
		r.Err = errors.New(w.Err)
	}
	return nil
}
