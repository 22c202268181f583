package portforward

import (
	"time"

	"github.com/vpn-confinement/vpn-confinement/policy"
)

// States of the port forwarding, as status shows them.
const (
	StateRequesting   = "requesting"
	StateMapped       = "mapped"
	StateNotAnswering = "gateway not answering"
	StateLost         = "lost"
	StateStopped      = "stopped"
)

// Status is the port forwarding as the agent records it in its state file,
// for status and the metrics. It holds no credentials.
type Status struct {
	State   string `json:"state"`
	Gateway string `json:"gateway,omitempty"`
	// Port is the forwarded port, the one the kill switch opens and the
	// applications listen on (0: none).
	Port uint16 `json:"port"`
	// ExternalPort is the gateway's public port, when it differs from Port
	// (an RFC 6886 gateway that mapped another port than the one asked).
	ExternalPort uint16   `json:"externalPort,omitempty"`
	Protocols    []string `json:"protocols,omitempty"`
	// Expires is when the lease runs out unless renewed.
	Expires time.Time `json:"expires,omitzero"`
	// Error is why the last request failed, if it did.
	Error string `json:"error,omitempty"`
	// Pending names each application the port is not handed to yet, with
	// why (retried with backoff).
	Pending []string `json:"pending,omitempty"`
	// Requests and Failures count the gateway requests and the failed
	// ones since the agent started.
	Requests uint64 `json:"requests"`
	Failures uint64 `json:"failures"`
}

// Forwarded is what the kill switch's forwarded-port sets hold while s is
// recorded: its port for each of its protocols, or nothing.
func (s *Status) Forwarded() policy.Forwarded {
	var f policy.Forwarded
	if s == nil || s.Port == 0 {
		return f
	}
	for _, proto := range s.Protocols {
		switch proto {
		case "tcp":
			f.TCP = []uint16{s.Port}
		case "udp":
			f.UDP = []uint16{s.Port}
		}
	}
	return f
}
