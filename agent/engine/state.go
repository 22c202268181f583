package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/atomicfile"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
)

// State is what the agent records about a namespace it manages, in
// /run/vpn-confinement/<name>/state.json. It holds no secrets.
type State struct {
	Name string `json:"name"`
	// Mode is how the namespace is confined: "" host mode (a named
	// namespace), ModeSidecar (the namespace the agent runs in).
	Mode       string         `json:"mode,omitempty"`
	Backend    config.Backend `json:"backend"`
	Interface  string         `json:"interface"`
	PID        int            `json:"pid,omitempty"` // process holding the data plane (userspace) or running the watchdog
	ConfigPath string         `json:"configPath,omitempty"`
	HostIf     string         `json:"hostInterface,omitempty"`
	DNS        []string       `json:"dns,omitempty"`
	IPv6       bool           `json:"ipv6"`
	Started    time.Time      `json:"started"`
	// ConfigDigests fingerprints each part of the running config (see
	// Digests; no keys), ConfigDigest all of it.
	ConfigDigests map[string]string `json:"configDigests,omitempty"`
	ConfigDigest  string            `json:"configDigest,omitempty"`
	// Reload is the outcome of the last reload (SIGHUP to run), if any.
	Reload *ReloadResult `json:"reload,omitempty"`

	// The active server of the pool (0 with one server): its index, its
	// wg-quick file and its endpoint as configured.
	Server       int    `json:"server"`
	ServerConfig string `json:"serverConfig,omitempty"`
	Endpoint     string `json:"endpoint,omitempty"`
	// Liveness is the running agent's view of the tunnel.
	Liveness *Liveness `json:"liveness,omitempty"`
	// PortForward is the running agent's provider port forwarding.
	PortForward *portforward.Status `json:"portForward,omitempty"`
}

// ReloadResult is what a reload did: the config it read (Digest), the
// parts it changed, or why it changed nothing.
type ReloadResult struct {
	At       time.Time `json:"at"`
	Digest   string    `json:"configDigest,omitempty"`
	Changed  []string  `json:"changed,omitempty"`
	Error    string    `json:"error,omitempty"`
	BadInput bool      `json:"badInput,omitempty"` // the config was invalid or needs a restart
}

// Liveness is the daemon's judgement of the tunnel, recorded when it
// changes.
type Liveness struct {
	// Recovery: "healthy", "retrying", "failing over" or "every server
	// dead" (see package liveness).
	Recovery string `json:"recovery"`
	// Verdict on the active server: "alive", "idle", "dead", "unknown".
	Verdict string `json:"verdict"`
	// Cause names why the tunnel was judged dead (never key material).
	Cause     string    `json:"cause,omitempty"`
	Since     time.Time `json:"since"`
	Failovers int       `json:"failovers"`
	// Standby is the warm standby (issue 25), nil in a pool of one.
	Standby *StandbyRecord `json:"standby,omitempty"`
	// DeadAt is when the latest recovery began: the first verdict
	// "dead" on a healthy tunnel. SwitchedAt is when its latest switch to
	// another server was done (the kill switch and the device changed).
	// Zero: none since the agent started. They are kept once the tunnel
	// is healthy again, so that a failover can be timed by the agent's
	// own clock (vpn-bench's failover split).
	DeadAt     time.Time `json:"deadAt,omitzero"`
	SwitchedAt time.Time `json:"switchedAt,omitzero"`
	// State is what status shows (State()); not recorded by the agent.
	State string `json:"state,omitempty"`
}

// StandbyRecord is the warm standby as the daemon last judged it: its
// server (Index -1: none), its state (arming, warm, dead, none) and, with
// none, why. status adds its handshake age from the device itself.
type StandbyRecord struct {
	Index      int    `json:"index"`
	ConfigFile string `json:"configFile,omitempty"`
	Endpoint   string `json:"endpoint,omitempty"`
	State      string `json:"state"`
	Why        string `json:"why,omitempty"`
}

// Tunnel states status shows: one of these, never "unknown".
const (
	TunnelAlive       = "alive"
	TunnelIdle        = "idle"
	TunnelDead        = "dead"
	TunnelFailingOver = "failing over"
	TunnelAllDead     = "every server dead"
)

// TunnelState is the tunnel in one word: the recovery's state while it
// is not healthy (a retry of the same server is failing over too), else
// the verdict. No evidence yet (just up, a handshake in flight) is idle:
// nothing was judged dead, and nothing has answered yet.
func (l *Liveness) TunnelState() string {
	switch {
	case l.Recovery == "every server dead":
		return TunnelAllDead
	case l.Recovery != "" && l.Recovery != "healthy":
		return TunnelFailingOver
	case l.Verdict == "dead":
		return TunnelDead
	case l.Verdict == "alive":
		return TunnelAlive
	}
	return TunnelIdle
}

// ReadState returns the recorded state, or os.ErrNotExist.
func ReadState(name string) (*State, error) {
	b, err := os.ReadFile(names.StateFile(name))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", names.StateFile(name), err)
	}
	return &s, nil
}

func writeState(s *State) error {
	if err := os.MkdirAll(names.StateDir(s.Name), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", names.StateDir(s.Name), err)
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	return atomicfile.Write(names.StateFile(s.Name), append(b, '\n'), 0o644)
}

// removeState removes the state file, and the runtime directory if that
// leaves it empty (a detached agent's log keeps it until down).
func removeState(name string) error {
	err := os.Remove(names.StateFile(name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	os.Remove(names.StateDir(name)) // fails harmlessly when not empty
	return nil
}

// ListStates returns the names of namespaces with a state file.
func ListStates() []string {
	ents, _ := os.ReadDir(names.RuntimeDir)
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			if _, err := os.Stat(names.StateFile(e.Name())); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// Problem describes a tunnel the agent judged not to carry traffic ("" when
// it does, or idles: an idle tunnel is not dead). status and /healthz both
// report it.
func (l *Liveness) Problem() string {
	switch {
	case l == nil:
		return ""
	case l.Recovery == "every server dead":
		return "every server of the pool is dead; the namespace stays closed and the agent keeps trying (" + l.Cause + ")"
	case l.Recovery != "" && l.Recovery != "healthy":
		return "tunnel dead, " + l.Recovery + ": " + l.Cause
	case l.Verdict == "dead":
		return "tunnel dead: " + l.Cause
	}
	return ""
}

// Liveness is what the daemon last recorded of the tunnel (nil: nothing).
func (inst *Instance) Liveness() *Liveness {
	if inst.state == nil {
		return nil
	}
	return inst.state.Liveness
}
