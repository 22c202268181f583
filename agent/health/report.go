// Package health inspects a confined namespace and reports what it found:
// the facts it read and what is wrong, each problem once. The daemon
// repairs from that report; status renders it.
package health

import (
	"fmt"
	"time"
)

// Kind classifies a problem, so repairs can be targeted.
type Kind int

const (
	NamespaceMissing Kind = iota
	PolicyMissing         // kill-switch table absent
	PolicyChanged         // table present but not what we compiled
	TunnelMissing         // link absent or down in the namespace
	DataPlaneDead         // userspace device stopped
	HostLinkMissing
	HostPolicyMissing
	RoutesWrong         // a default route does not point at the tunnel
	NamespaceUnreadable // it exists but cannot be opened (nothing to repair)

	// Found only when Target.Peers asks for the WireGuard state (status).
	HandshakeStale      // no peer answers: no handshake, or a stale one while sending
	WireGuardUnreadable // the link is up but its WireGuard state cannot be read

	// Found by status from the agent's state file, never by the daemon
	// (which is the agent).
	StateMissing     // the namespace exists but no agent state
	AgentNotRunning  // the recorded agent process is gone
	ConfigUnreadable // the recorded config file cannot be loaded

	// Recorded by the running agent (package liveness) in its state
	// file: the tunnel does not carry traffic (failing over, or every
	// server of the pool dead).
	TunnelDead

	// The kill-switch table could not be read (e.g. no file descriptor
	// left): whether it is loaded is unknown, which is not "missing". The
	// repair re-applies it all the same (atomically: never open).
	PolicyUnreadable

	// The pin table (wireguard.pinEndpoints) in the host namespace is
	// missing, unreadable or not what the agent loaded: the tunnel's
	// socket may reach other addresses. Found only when the running agent
	// says what it must be (Target.Pin).
	PinMissing
)

// Problem is one thing wrong with a namespace.
type Problem struct {
	Kind   Kind
	Detail string
}

func (p Problem) String() string { return p.Detail }

// Report is one inspection of a namespace.
type Report struct {
	Name      string
	Interface string
	Namespace bool // the namespace exists
	Link      Link
	Policy    Policy
	Peers     []Peer // read only when Target.Peers
	Problems  []Problem
}

// Link is the tunnel link as found in the namespace.
type Link struct {
	Present   bool
	Up        bool
	MTU       int
	Addresses []string // without link-local ones
}

// Policy is the kill switch as loaded in the namespace.
type Policy struct {
	Loaded  bool              `json:"loaded"`
	Matches bool              `json:"matchesConfig"`
	Rules   int               `json:"rules"`
	Drops   map[string]uint64 `json:"dropPackets,omitempty"`
}

// Peer is a WireGuard peer, without keys.
type Peer struct {
	Endpoint        string     `json:"endpoint,omitempty"`
	LatestHandshake *time.Time `json:"latestHandshake,omitempty"`
	HandshakeAgeSec *float64   `json:"handshakeAgeSeconds,omitempty"`
	RxBytes         int64      `json:"rxBytes"`
	TxBytes         int64      `json:"txBytes"`
	Keepalive       float64    `json:"keepaliveSeconds,omitempty"`
	// Idle: the last handshake is older than WireGuard's session limit but
	// nothing was sent since, so nothing needed a new one (not a problem).
	Idle bool `json:"idle,omitempty"`
	// Standby: a peer with no allowed IPs, the agent's warm standby
	// (issue 25): nothing routes to it, so its handshakes say nothing of
	// the tunnel's traffic and it is not judged with the active peer.
	Standby bool `json:"standby,omitempty"`
}

// Healthy says nothing is wrong.
func (r *Report) Healthy() bool { return len(r.Problems) == 0 }

// Has says whether a problem of kind k was found.
func (r *Report) Has(k Kind) bool {
	for _, p := range r.Problems {
		if p.Kind == k {
			return true
		}
	}
	return false
}

// Add records a problem, unless one of the same kind is there already:
// each problem is listed once.
func (r *Report) Add(k Kind, format string, args ...any) {
	if !r.Has(k) {
		r.Problems = append(r.Problems, Problem{k, fmt.Sprintf(format, args...)})
	}
}

// Strings lists the problems' descriptions.
func (r *Report) Strings() []string {
	var out []string
	for _, p := range r.Problems {
		out = append(out, p.Detail)
	}
	return out
}
