package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// agentConfig is a confined namespace's config as the bench writes it:
// namespace name, its own private key file and tunnel address, the
// provider's peer at endpoint, the provider's tunnel address as resolver.
func (t *topo) agentConfig(name string, backend config.Backend, mtu int, keyFile, addr, endpoint, dns string) *config.Config {
	return &config.Config{
		Name:    name,
		Backend: string(backend),
		WireGuard: config.WireGuard{
			PrivateKeyFile: keyFile,
			Addresses:      []string{addr + "/32"},
			MTU:            mtu,
			Peers: []config.Peer{{
				PublicKey:  t.PeerKey.PublicKey().String(),
				Endpoint:   endpoint,
				AllowedIPs: []string{"0.0.0.0/0"},
			}},
		},
		IPv6: "block",
		DNS:  config.DNS{Servers: []string{dns}},
	}
}

// agentSpec resolves the main agent's config for namespace name the way
// `vpn-agent up` does (config.Resolve, key read from a 0600 file); the
// in-process up/down timing uses it.
func (t *topo) agentSpec(name string, backend config.Backend, mtu int, keyFile string) (*config.Spec, error) {
	c := t.agentConfig(name, backend, mtu, keyFile, tunnelAgent, fmt.Sprintf("%s:%d", underlayPeer, peerPort), tunnelPeer)
	s, err := config.Resolve(c, config.Options{})
	if err != nil {
		return nil, fmt.Errorf("bench agent config: %w", err)
	}
	return s, nil
}

// writeAgentConfig writes c to path (0600) and reads it back as the
// agent will (config.LoadSpec: the policy the bench toggles is compiled
// from it).
func writeAgentConfig(path string, c *config.Config) (*config.Spec, error) {
	if err := writeConfig(path, c, ""); err != nil {
		return nil, err
	}
	s, err := config.LoadSpec(path, config.Options{})
	if err != nil {
		return nil, fmt.Errorf("the agent's config is rejected: %w", err)
	}
	return s, nil
}

// writeConfig writes c with fragment (a JSON object, may be empty)
// merged in to path (0600).
func writeConfig(path string, c *config.Config, fragment string) error {
	data, err := mergeJSON(c, fragment)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write agent config: %w", err)
	}
	return nil
}

// validateWith checks a config file with the agent binary itself
// (`vpn-agent validate --static`): a fragment only a newer agent knows is
// judged by the agent that will run it, not by the bench's own code.
func validateWith(bin *Binary, path, fragment string) error {
	_, code, _, err := runAgentCmd(bin, "", "validate", "--static", "--config", path)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d", code)
	}
	if err != nil {
		return fmt.Errorf("the agent rejects its config with %s merged in: %w", fragmentOrNone(fragment), err)
	}
	return nil
}

func fragmentOrNone(f string) string {
	if strings.TrimSpace(f) == "" {
		return "no fragment"
	}
	return f
}

// mergeJSON encodes base and merges the JSON object fragment into it:
// objects merge key by key, anything else replaces.
func mergeJSON(base any, fragment string) ([]byte, error) {
	b, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if strings.TrimSpace(fragment) != "" {
		var frag map[string]any
		if err := json.Unmarshal([]byte(fragment), &frag); err != nil {
			return nil, fmt.Errorf("config fragment %s: not a JSON object: %w", fragment, err)
		}
		mergeInto(doc, frag)
	}
	return json.MarshalIndent(doc, "", "  ")
}

func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeInto(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// policyState loads or removes the kill-switch table in the confined
// namespace, remembering what is loaded.
type policyState struct {
	spec   *config.Spec
	loaded bool
}

func (p *policyState) set(on bool) error {
	if on == p.loaded {
		return nil
	}
	path := names.Netns(p.spec.Name)
	var err error
	if on {
		err = policy.Apply(policy.Compile(p.spec), path)
	} else {
		err = policy.Remove(path, names.Table)
	}
	if err != nil {
		return fmt.Errorf("switch kill switch %v: %w", on, err)
	}
	p.loaded = on
	return nil
}

// nftSnapshot reads the kill-switch table and its counters back.
func nftSnapshot(ns string) *NFTSnapshot {
	st, err := policy.Inspect(names.Netns(ns), names.Table)
	if err != nil {
		return &NFTSnapshot{Error: err.Error()}
	}
	s := &NFTSnapshot{Loaded: st.Loaded}
	if st.Loaded {
		s.Rules = st.RuleCount()
		s.Counters = map[string]uint64{}
		for _, c := range st.Counters {
			s.Counters[c.Name] = c.Packets
		}
	}
	return s
}
