package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// Named counter and sets of the pin table.
const (
	CounterPinDrop = "pin_drop"
	SetPin4        = "pin4"
	SetPin6        = "pin6"
	SetPinPorts    = "pin_ports"
)

// PinEnv is what the pin table needs besides the config: how the tunnel's
// packets are told from the host's other packets, and where they may go.
type PinEnv struct {
	// Mark is the device's firewall mark (config.Spec.DeviceMark): kernel
	// WireGuard puts it on every packet it sends (they carry no socket),
	// wireguard-go on its sockets. Never 0.
	Mark uint32
	// Agent, for the userspace backend, is the agent's cgroup: only its
	// marked packets are the tunnel's, so another program on the host that
	// uses the same mark is not held to the endpoints. Nil: the kernel
	// backend (the mark alone).
	Agent *AgentSocket
	// Endpoints are the active server's endpoints as the device has them
	// (names resolved); during a switch, the old server's too.
	Endpoints []netip.AddrPort
}

// CompilePin returns the host-side table that pins namespace s's tunnel
// socket to its endpoints (wireguard.pinEndpoints): in the agent's own
// (host) namespace, packets of the tunnel (env.Mark, and for the userspace
// backend env.Agent's cgroup) to an address or UDP port not in the
// endpoint sets are counted and dropped. Every other packet of the host
// passes: the output chain accepts by default, and other tables still
// apply. The sets hold the endpoints' addresses and ports apart (a peer
// of the server may reach another peer's port), as the sidecar table does.
func CompilePin(s *config.Spec, env PinEnv) (*Ruleset, error) {
	if env.Mark == 0 {
		return nil, errors.New("pin table: the device has no firewall mark to tell its packets by")
	}
	key := []Expr{Mark{Value: env.Mark}}
	var levels []uint32
	if env.Agent != nil {
		var err error
		if levels, err = env.Agent.levels(); err != nil {
			return nil, fmt.Errorf("pin table (userspace backend): %w", err)
		}
	}
	var v4, v6 []netip.Addr
	var epPorts []uint16
	for _, ep := range env.Endpoints {
		a := ep.Addr().Unmap()
		if !a.IsValid() || ep.Port() == 0 {
			return nil, fmt.Errorf("pin table: endpoint %s has no address or port", ep)
		}
		if a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
		epPorts = append(epPorts, ep.Port())
	}
	if len(epPorts) == 0 {
		return nil, errors.New("pin table: no endpoint to pin to")
	}
	var rules []Rule
	keyed := func(l uint32, tail ...Expr) []Expr {
		e := slices.Clone(key)
		if env.Agent != nil {
			e = append(e, SocketCgroup{Level: l, ID: env.Agent.CgroupID})
		}
		return append(e, tail...)
	}
	who := "the tunnel's packets (its mark)"
	if env.Agent == nil {
		levels = []uint32{0}
	} else {
		who = "the tunnel's packets (its mark, from the agent's cgroup)"
	}
	for _, l := range levels {
		where := ""
		if env.Agent != nil {
			where = fmt.Sprintf(" (the agent's cgroup at level %d)", l)
		}
		rules = append(rules,
			Rule{
				Exprs:   keyed(l, Addr{Set: SetPin4}, Port{Proto: UDP, Set: SetPinPorts}, Accept),
				Comment: "WireGuard UDP to an IPv4 endpoint of the active server" + where,
			},
			Rule{
				Exprs:   keyed(l, Addr{V6: true, Set: SetPin6}, Port{Proto: UDP, Set: SetPinPorts}, Accept),
				Comment: "WireGuard UDP to an IPv6 endpoint of the active server" + where,
			},
			Rule{
				Exprs:   keyed(l, CounterRef{CounterPinDrop}, Drop),
				Comment: "any other destination (a changed or roamed endpoint): count and drop" + where,
			})
	}
	r := &Ruleset{
		Family:  FamilyINet,
		Name:    names.PinTable(s.Name),
		Comment: fmt.Sprintf("host side of namespace %q: %s go only to the active server's endpoints", s.Name, who),
		Counters: []Counter{
			{CounterPinDrop, "packets of the tunnel to an address or port that is not an endpoint of the active server"},
		},
		Sets: []Set{
			{Name: SetPin4, Type: SetIPv4Addr, Comment: "IPv4 endpoints of the active server, as resolved", Addrs: hosts(v4)},
			{Name: SetPin6, Type: SetIPv6Addr, Comment: "IPv6 endpoints of the active server, as resolved", Addrs: hosts(v6)},
			{Name: SetPinPorts, Type: SetInetService, Comment: "the endpoints' UDP ports", Ports: ports(epPorts)},
		},
		Chains: []Chain{{
			Name: "output", Type: ChainFilter, Hook: HookOutput, Priority: PriorityFilter, Policy: PolicyAccept,
			Comment: "the tunnel's own UDP leaves only to its endpoints; nothing else of the host is judged here",
			Rules:   rules,
		}},
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("pin table: %w", err)
	}
	return r, nil
}
