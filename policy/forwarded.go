package policy

import (
	"slices"
	"strconv"
	"strings"
)

// The sets that hold the port the provider forwards (a NAT-PMP lease).
// They exist only when port forwarding is configured, empty in what
// Compile returns; the agent fills them while a lease lives, by adding and
// removing elements in one netlink batch (SetForwarded), never by
// replacing the table.
const (
	SetForwardedTCP = "forwarded_tcp"
	SetForwardedUDP = "forwarded_udp"
)

// Forwarded is the runtime content of the forwarded-port sets.
type Forwarded struct {
	TCP, UDP []uint16
}

// IsZero reports whether no port is forwarded.
func (f Forwarded) IsZero() bool { return len(f.TCP) == 0 && len(f.UDP) == 0 }

// Equal reports whether f and g open the same ports.
func (f Forwarded) Equal(g Forwarded) bool {
	return slices.Equal(ports(f.TCP), ports(g.TCP)) && slices.Equal(ports(f.UDP), ports(g.UDP))
}

// String is "tcp 51413, udp 51413" (or "none").
func (f Forwarded) String() string {
	var parts []string
	for _, p := range []struct {
		proto string
		ports []uint16
	}{{"tcp", ports(f.TCP)}, {"udp", ports(f.UDP)}} {
		for _, n := range p.ports {
			parts = append(parts, p.proto+" "+strconv.Itoa(int(n)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// WithForwarded returns a copy of r whose forwarded-port sets hold f: the
// table as it must be while those leases live. A ruleset without the sets
// (port forwarding off) is returned as it is, and so is f's protocol whose
// set is missing.
func (r *Ruleset) WithForwarded(f Forwarded) *Ruleset {
	out := *r
	out.Sets = slices.Clone(r.Sets)
	for i := range out.Sets {
		switch out.Sets[i].Name {
		case SetForwardedTCP:
			out.Sets[i].Ports = ports(f.TCP)
		case SetForwardedUDP:
			out.Sets[i].Ports = ports(f.UDP)
		}
	}
	return &out
}
