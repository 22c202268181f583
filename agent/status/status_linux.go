// Package status reports what a confined namespace looks like right now,
// from live inspection (netlink, wgctrl, nftables), never from memory. It
// never reports key material.
package status

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.zx2c4.com/wireguard/wgctrl"
)

// Report is one namespace's status.
type Report struct {
	Name         string   `json:"name"`
	Healthy      bool     `json:"healthy"`
	Problems     []string `json:"problems,omitempty"`
	Backend      string   `json:"backend,omitempty"`
	AgentPID     int      `json:"agentPid,omitempty"`
	AgentRunning bool     `json:"agentRunning"`
	Interface    string   `json:"interface"`
	LinkUp       bool     `json:"linkUp"`
	Addresses    []string `json:"addresses,omitempty"`
	MTU          int      `json:"mtu,omitempty"`
	Peers        []Peer   `json:"peers,omitempty"`
	Policy       Policy   `json:"policy"`
	DNS          []string `json:"dns,omitempty"`
	HostLink     string   `json:"hostLink,omitempty"`
}

// Peer is a WireGuard peer, without keys.
type Peer struct {
	Endpoint        string     `json:"endpoint,omitempty"`
	LatestHandshake *time.Time `json:"latestHandshake,omitempty"`
	HandshakeAgeSec *float64   `json:"handshakeAgeSeconds,omitempty"`
	RxBytes         int64      `json:"rxBytes"`
	TxBytes         int64      `json:"txBytes"`
	Keepalive       float64    `json:"keepaliveSeconds,omitempty"`
}

// Policy is the kill switch as loaded in the namespace.
type Policy struct {
	Loaded  bool              `json:"loaded"`
	Matches bool              `json:"matchesConfig"`
	Rules   int               `json:"rules"`
	Drops   map[string]uint64 `json:"dropPackets,omitempty"`
}

// staleHandshake: WireGuard re-handshakes every 2 minutes while traffic
// flows; with keepalive on, a handshake older than this means trouble.
const staleHandshake = 180 * time.Second

// Names lists namespaces the agent knows about (with a state file).
func Names() []string { return engine.ListStates() }

// Get inspects one namespace. An unknown name returns os.ErrNotExist.
func Get(name string) (*Report, error) {
	if err := config.ValidateName(name); err != nil {
		return nil, err
	}
	st, stErr := engine.ReadState(name)
	if stErr != nil && !netns.Exists(name) {
		return nil, fmt.Errorf("namespace %s: %w", name, os.ErrNotExist)
	}
	r := &Report{Name: name, Interface: names.Tunnel(name)}
	if st != nil {
		r.Backend, r.Interface, r.AgentPID, r.DNS, r.HostLink = string(st.Backend), st.Interface, st.PID, st.DNS, st.HostIf
	} else {
		r.Problems = append(r.Problems, "namespace exists but no agent state (left by a crash?); run vpn-agent up or down")
	}
	if r.AgentPID > 0 {
		r.AgentRunning = processAlive(r.AgentPID)
		if !r.AgentRunning {
			r.Problems = append(r.Problems, fmt.Sprintf("agent (pid %d) is not running", r.AgentPID))
		}
	}
	inspectLink(r)
	inspectWireGuard(r)
	var spec *config.Spec
	if st != nil && st.ConfigPath != "" {
		s, err := config.LoadSpec(st.ConfigPath, config.Options{})
		if err != nil {
			r.Problems = append(r.Problems, "cannot load config "+st.ConfigPath+": "+err.Error())
		} else {
			spec = s
		}
	}
	inspectPolicy(r, spec)
	if spec != nil {
		for _, p := range health.Check(spec, nil) {
			if p.Kind != health.PolicyMissing && p.Kind != health.PolicyChanged {
				r.Problems = append(r.Problems, p.String())
			}
		}
	}
	r.Healthy = len(r.Problems) == 0
	return r, nil
}

func inspectLink(r *Report) {
	h, err := netns.Handle(r.Name)
	if err != nil {
		r.Problems = append(r.Problems, "namespace missing")
		return
	}
	defer h.Close()
	l, err := h.LinkByName(r.Interface)
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("interface %s missing: no tunnel (traffic is blocked)", r.Interface))
		return
	}
	r.LinkUp = l.Attrs().Flags&1 != 0
	r.MTU = l.Attrs().MTU
	if !r.LinkUp {
		r.Problems = append(r.Problems, fmt.Sprintf("interface %s is down", r.Interface))
	}
	addrs, _ := h.AddrList(l, 0)
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			r.Addresses = append(r.Addresses, a.IPNet.String())
		}
	}
}

func inspectWireGuard(r *Report) {
	err := netns.Do(r.Name, func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		d, err := c.Device(r.Interface)
		if err != nil {
			return err
		}
		now := time.Now()
		fresh := false
		for _, p := range d.Peers {
			pr := Peer{RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes, Keepalive: p.PersistentKeepaliveInterval.Seconds()}
			if p.Endpoint != nil {
				pr.Endpoint = p.Endpoint.String()
			}
			if !p.LastHandshakeTime.IsZero() {
				t := p.LastHandshakeTime.UTC()
				age := now.Sub(p.LastHandshakeTime).Seconds()
				pr.LatestHandshake, pr.HandshakeAgeSec = &t, &age
				if p.PersistentKeepaliveInterval == 0 || now.Sub(p.LastHandshakeTime) < staleHandshake+p.PersistentKeepaliveInterval {
					fresh = true
				}
			}
			r.Peers = append(r.Peers, pr)
		}
		if !fresh {
			r.Problems = append(r.Problems, "no recent handshake with any peer")
		}
		return nil
	})
	if err != nil && r.LinkUp {
		r.Problems = append(r.Problems, "cannot read WireGuard state: "+err.Error())
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "vpn-agent")
}
