package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// AgentSocket identifies the agent's own sockets in a way a confined app
// cannot forge: by the cgroup v2 the socket was created in. A firewall
// mark is no such thing: an app with CAP_NET_RAW (which Docker and
// Kubernetes give containers by default) may set SO_MARK since Linux 5.17,
// and with a raw socket it writes any addresses and ports. The cgroup of a
// socket is the cgroup of the task that created it (sk_alloc ->
// cgroup_sk_alloc reads current's css_set), and a process cannot move
// itself into another container's cgroup without write access to that
// cgroup's cgroup.procs, which a container does not have.
type AgentSocket struct {
	// CgroupID is the id of the agent's cgroup: the inode number of its
	// directory in the cgroup v2 file system. Never 1, the root, from
	// which every socket descends.
	CgroupID uint64
	// Level is how deep that cgroup is below the root of the cgroup v2
	// hierarchy (1: a child of the root), or 0 when the agent cannot tell:
	// inside a cgroup namespace (a container's usual view) it sees its
	// own cgroup as "/". CompileSidecar then matches the id at every level
	// from 1 to MaxCgroupLevel; ids are unique, so only the agent's own
	// cgroup, at its real level, matches.
	Level int
	// Kernel says the tunnel is the kernel's WireGuard. Its packets carry
	// no socket of the agent (skb->sk is NULL for handshakes and
	// keepalives, and the inner packet's socket, the app's, for encrypted
	// data: iptunnel_xmit keeps it), so the cgroup cannot tell them. They
	// are matched by what only the kernel's socket sends: UDP from the
	// device's listen port (that socket holds the port, so no other socket
	// can send from it) carrying the device's fwmark (setting it takes
	// CAP_NET_RAW or CAP_NET_ADMIN). A process with CAP_NET_RAW could
	// write both into a raw socket's packets, as it can send anything by
	// AF_PACKET, which nftables does not see, on either backend: the app
	// must run without CAP_NET_RAW (docs/sidecar.md).
	Kernel bool
}

// MaxCgroupLevel is the deepest cgroup the agent may run in when its level
// is unknown. Kubernetes pods' containers sit at level 3 to 5 (7 in kind),
// compose services' at 2. Deeper, the agent's packets match no rule: the
// tunnel does not come up (fail closed), and the agent says so.
const MaxCgroupLevel = 16

// Chains of the sidecar table besides the host mode ones it shares.
const (
	chainOutPod   = "out_pod"
	chainOutAgent = "out_agent"
)

// CompileSidecar returns the kill switch of the network namespace the agent
// runs in, in sidecar mode (s.Sidecar set): the same table name as host
// mode, so Apply replaces either atomically. endpoints are the resolved
// WireGuard endpoints of every server of the pool (IPv4; endpoints given
// as host names are known only at run time). Tunnel traffic is treated as
// in host mode. Every other interface is the pod's side (eth0, and any
// interface that appears later): by it leave only replies, the agent's own
// WireGuard UDP to the endpoints, the agent's DNS to clusterDNS.server,
// and what goes to allowedSubnets; in by it come only replies and new TCP
// connections to the metrics port from allowedSubnets.
func CompileSidecar(s *config.Spec, agent AgentSocket, endpoints []netip.AddrPort) (*Ruleset, error) {
	sc := s.Sidecar
	if sc == nil {
		return nil, errors.New("sidecar kill switch: the config has no sidecar section")
	}
	levels, err := agent.levels()
	if err != nil {
		return nil, err
	}
	var epAddrs []netip.Addr
	var epPorts []uint16
	for _, ep := range endpoints {
		a := ep.Addr().Unmap()
		if !a.Is4() || ep.Port() == 0 {
			return nil, fmt.Errorf("sidecar kill switch: endpoint %s: only IPv4 endpoints with a port are supported in sidecar mode", ep)
		}
		for _, p := range sc.AllowedSubnets {
			if p.Contains(a) {
				return nil, fmt.Errorf("sidecar kill switch: endpoint %s is inside sidecar.allowedSubnets %s, so anything in the pod could reach it; narrow allowedSubnets", ep, p)
			}
		}
		epAddrs, epPorts = append(epAddrs, a), append(epPorts, ep.Port())
	}
	if len(epAddrs) == 0 {
		return nil, errors.New("sidecar kill switch: no WireGuard endpoint given")
	}
	if agent.Kernel && (s.ListenPort <= 0 || s.ListenPort > 65535 || s.DeviceMark() == 0) {
		return nil, fmt.Errorf("sidecar kill switch: the kernel backend's packets are matched by the listen port and the fwmark, and the config gives port %d, mark %d", s.ListenPort, s.DeviceMark())
	}
	var clusterDNS []netip.Addr
	if d := sc.ClusterDNS; d != nil {
		clusterDNS = []netip.Addr{d.Server}
	}
	var metrics []uint16
	if m := s.Metrics; m != nil && m.Network == "tcp" {
		if ap, err := netip.ParseAddrPort(m.Address); err == nil {
			metrics = []uint16{ap.Port()}
		}
	}
	var resolver []netip.Addr
	if r := s.EndpointResolver; r.IsValid() && r.Addr().Unmap().Is4() {
		resolver = []netip.Addr{r.Addr().Unmap()}
	}

	r := &Ruleset{
		Family: FamilyINet,
		Name:   names.Table,
		Comment: fmt.Sprintf("sidecar kill switch of %q in the namespace the agent runs in: the only way out is the WireGuard interface %q; the pod's interfaces carry only the agent's WireGuard and cluster DNS, allowedSubnets and replies",
			s.Name, s.Interface),
		Counters: []Counter{
			{CounterOutIPv6, "IPv6 sent while IPv6 is blocked, or by the pod's interface"},
			{CounterOutDNS, "DNS not sent to an allowed resolver through the tunnel, or by the pod's interface (leak attempts)"},
			{CounterOutReject, "other traffic that would bypass the tunnel (rejected), the app's packets to the endpoints included"},
			{CounterInIPv6, "IPv6 received while IPv6 is blocked"},
			{CounterInSpoof, "packets for a tunnel address arriving on another interface (CVE-2019-14899)"},
			{CounterInInvalid, "packets conntrack considers invalid"},
			{CounterInDrop, "other inbound traffic"},
			{CounterFwdDrop, "packets the namespace was asked to route (it never routes)"},
		},
		Sets: slices.Concat(sharedSets(s), []Set{
			{Name: "allowed4", Type: SetIPv4Addr, Interval: true, Comment: "sidecar.allowedSubnets: cluster and LAN ranges", Addrs: normalizePrefixes(sc.AllowedSubnets, false)},
			{Name: "endpoints4", Type: SetIPv4Addr, Comment: "WireGuard endpoints of the pool (the agent's socket only)", Addrs: hosts(epAddrs)},
			{Name: "wg_ports", Type: SetInetService, Comment: "WireGuard endpoint ports", Ports: ports(epPorts)},
			{Name: "cluster_dns4", Type: SetIPv4Addr, Comment: "sidecar.clusterDNS.server (the agent's forwarder only)", Addrs: hosts(clusterDNS)},
			{Name: "cluster_dns_ports", Type: SetInetService, Comment: "DNS and DNS over TLS", Ports: []uint16{53, 853}},
			{Name: "resolver4", Type: SetIPv4Addr, Comment: "wireguard.endpointResolver (the agent only)", Addrs: hosts(resolver)},
			{Name: "metrics_tcp", Type: SetInetService, Comment: "metrics.listen port (kubelet probes, Prometheus)", Ports: metrics},
		}),
	}
	out := outputChain(s)[1:] // out_tunnel, out_dns: as host mode
	r.Chains = slices.Concat([]Chain{sidecarOutput(s)}, out, sidecarOutPod(s, agent, levels), []Chain{sidecarOutAgent(s)},
		sidecarInput(s), []Chain{inTunnelChain(s), forwardChain()})
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("sidecar kill switch: %w", err)
	}
	return r, nil
}

// CompileNamespace returns the kill switch of s's namespace: host mode's
// (Compile) or, with s.Sidecar set, sidecar mode's (CompileSidecar with
// sidecar, which must then be given). It is the one place the variant is
// chosen.
func CompileNamespace(s *config.Spec, sidecar *SidecarEnv) (*Ruleset, error) {
	if s.Sidecar == nil {
		return Compile(s), nil
	}
	if sidecar == nil {
		return nil, errors.New("sidecar kill switch: the agent's socket identity and the endpoints are needed in sidecar mode")
	}
	return CompileSidecar(s, sidecar.Agent, sidecar.Endpoints)
}

// SidecarEnv is what the sidecar kill switch needs besides the config: who
// the agent is, and the endpoints as resolved.
type SidecarEnv struct {
	Agent     AgentSocket
	Endpoints []netip.AddrPort
}

// levels returns the cgroup levels to match the agent's id at.
func (a AgentSocket) levels() ([]uint32, error) {
	switch {
	case a.CgroupID <= 1:
		return nil, errors.New("sidecar kill switch: the agent runs in the root cgroup, and a match on it would let every socket pass as the agent; run the agent in a cgroup of its own (its own container)")
	case a.Level < 0 || a.Level > MaxCgroupLevel:
		return nil, fmt.Errorf("sidecar kill switch: the agent's cgroup is %d levels deep; at most %d are supported", a.Level, MaxCgroupLevel)
	case a.Level > 0:
		return []uint32{uint32(a.Level)}, nil
	}
	out := make([]uint32, MaxCgroupLevel)
	for i := range out {
		out[i] = uint32(i + 1)
	}
	return out, nil
}

// sharedSets are the sets of the host mode chains the sidecar table reuses
// (out_tunnel, out_dns, in_tunnel and the spoofing rules).
func sharedSets(s *config.Spec) []Set {
	var out []Set
	for _, set := range namespaceSets(s) {
		switch set.Name {
		case "accessible4", "mapped_tcp", "mapped_udp": // the host link's; none here
		default:
			out = append(out, set)
		}
	}
	return out
}

func sidecarOutput(s *config.Spec) Chain {
	return Chain{
		Name: "output", Type: ChainFilter, Hook: HookOutput, Priority: PriorityFilter, Policy: PolicyDrop,
		Comment: "what the namespace may send: the tunnel, loopback, and on the pod's interfaces what out_pod allows",
		Rules: append(tunnelThenLoopback(true, s.Interface,
			"the tunnel: checked in out_tunnel, as in host mode",
			"loopback stays inside the namespace (the app asks the agent's DNS forwarder on 127.0.0.1:53)"),
			Rule{
				Exprs:   []Expr{Goto{chainOutPod}},
				Comment: "every other interface is the pod's side (eth0 and any that appears later): checked in out_pod",
			}),
	}
}

// sidecarOutPod is what may leave by the pod's interfaces. The agent's
// packets are told from the app's by their socket's cgroup, one rule per
// level the agent's cgroup may be at; the kernel backend's by its listen
// port and mark (AgentSocket.Kernel).
func sidecarOutPod(s *config.Spec, agent AgentSocket, levels []uint32) []Chain {
	rules := []Rule{
		{
			Exprs:   []Expr{NFProto{V6: true}, CounterRef{CounterOutIPv6}, Drop},
			Comment: "IPv6 never leaves by the pod's interface: endpoints and allowedSubnets are IPv4",
		},
		{
			Exprs:   []Expr{CtDirectionReply{}, Accept},
			Comment: "replies to connections made to the pod (kubelet probes, metrics from allowedSubnets)",
		},
	}
	if agent.Kernel {
		rules = append(rules, Rule{
			Exprs: []Expr{Mark{uint32(s.DeviceMark())}, Port{Proto: UDP, Src: true, Port: uint16(s.ListenPort)},
				Addr{Set: "endpoints4"}, Port{Proto: UDP, Set: "wg_ports"}, Accept},
			Comment: "kernel WireGuard's UDP to the endpoints: its mark, from its listen port (held by its socket: no app socket sends from it)",
		})
	}
	for _, l := range levels {
		rules = append(rules, Rule{
			Exprs:   []Expr{SocketCgroup{Level: l, ID: agent.CgroupID}, Goto{chainOutAgent}},
			Comment: fmt.Sprintf("the agent's own sockets (its cgroup, at level %d; an app cannot forge it as it can a mark): out_agent", l),
		})
	}
	for _, p := range []Proto{UDP, TCP} {
		rules = append(rules, Rule{
			Exprs:   []Expr{Port{Proto: p, Set: "dns_ports"}, CounterRef{CounterOutDNS}, Reject{TCPReset: p == TCP}},
			Comment: fmt.Sprintf("%s DNS of the app never uses the pod's interface, not even to the cluster resolver: count and refuse", p),
		})
	}
	rules = append(rules, Rule{
		Exprs:   []Expr{Addr{Set: "allowed4"}, Accept},
		Comment: "sidecar.allowedSubnets: the cluster and LAN ranges the config lets the pod reach directly",
	})
	rules = append(rules, rejectRest()...)
	return []Chain{{
		Name:    chainOutPod,
		Comment: "packets leaving by the pod's interfaces: only replies, the agent's WireGuard and cluster DNS, and allowedSubnets",
		Rules:   rules,
	}}
}

// sidecarOutAgent is what the agent's own sockets may send by the pod's
// interfaces.
func sidecarOutAgent(s *config.Spec) Chain {
	rules := []Rule{{
		Exprs:   []Expr{Addr{Set: "endpoints4"}, Port{Proto: UDP, Set: "wg_ports"}, Accept},
		Comment: "the agent's WireGuard UDP to the pool's endpoints",
	}}
	for _, p := range []Proto{UDP, TCP} {
		rules = append(rules, Rule{
			Exprs:   []Expr{Addr{Set: "cluster_dns4"}, Port{Proto: p, Set: "cluster_dns_ports"}, Accept},
			Comment: fmt.Sprintf("%s DNS of the agent's forwarder to the cluster resolver, for names under clusterDNS.domains only", p),
		})
	}
	if r := s.EndpointResolver; r.IsValid() && r.Addr().Unmap().Is4() {
		for _, p := range []Proto{UDP, TCP} {
			rules = append(rules, Rule{
				Exprs:   []Expr{Addr{Set: "resolver4"}, Port{Proto: p, Port: r.Port()}, Accept},
				Comment: fmt.Sprintf("%s DNS of the agent to wireguard.endpointResolver, for the endpoints' host names", p),
			})
		}
	}
	rules = append(rules, refuse(CounterOutReject,
		"the agent sends nothing else by the pod's interface: count and reset",
		"the agent sends nothing else by the pod's interface: count and reject")...)
	return Chain{
		Name:    chainOutAgent,
		Comment: "packets of the agent's own sockets leaving by the pod's interfaces",
		Rules:   rules,
	}
}

func sidecarInput(s *config.Spec) []Chain {
	head := tunnelThenLoopback(false, s.Interface,
		"the tunnel: checked in in_tunnel, as in host mode",
		"loopback stays inside the namespace")
	pod := []Rule{
		{
			Exprs:   []Expr{NFProto{V6: true}, CounterRef{CounterInIPv6}, Drop},
			Comment: "no IPv6 arrives by the pod's interface: endpoints and allowedSubnets are IPv4",
		},
		{
			Exprs:   []Expr{Addr{Set: "tunnel4"}, CounterRef{CounterInSpoof}, Drop},
			Comment: "CVE-2019-14899: a tunnel address reached from another interface is spoofed: count and drop",
		},
		{
			Exprs:   []Expr{CtStateMatch{CtInvalid}, CounterRef{CounterInInvalid}, Drop},
			Comment: "conntrack cannot place it: count and drop",
		},
		{
			Exprs:   []Expr{CtStateMatch{CtEstablished | CtRelated}, Accept},
			Comment: "replies by the pod's interface: to the agent's WireGuard and DNS, and to connections to allowedSubnets",
		},
		{
			Exprs:   []Expr{Addr{Src: true, Set: "allowed4"}, CtStateMatch{CtNew}, Port{Proto: TCP, Set: "metrics_tcp"}, Accept},
			Comment: "kubelet probes and Prometheus: metrics.listen (/healthz, /readyz, /metrics), from allowedSubnets only",
		},
		{
			Exprs:   []Expr{CounterRef{CounterInDrop}, Drop},
			Comment: "nothing else may reach the namespace by the pod's interface: count and drop",
		},
	}
	return []Chain{{
		Name: "input", Type: ChainFilter, Hook: HookInput, Priority: PriorityFilter, Policy: PolicyDrop,
		Comment: "what may reach the namespace: replies, open ports via the tunnel, the metrics port from allowedSubnets",
		Rules:   slices.Concat(head, pod),
	}}
}

func forwardChain() Chain {
	return Chain{
		Name: "forward", Type: ChainFilter, Hook: HookForward, Priority: PriorityFilter, Policy: PolicyDrop,
		Comment: "the namespace is not a router",
		Rules: []Rule{{
			Exprs:   []Expr{CounterRef{CounterFwdDrop}, Drop},
			Comment: "the namespace never forwards: count and drop",
		}},
	}
}
