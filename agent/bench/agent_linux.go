package bench

import (
	"context"
	"fmt"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// agentSpec resolves a confined-namespace config the way `vpn-agent up`
// does (config.Resolve, key read from a 0600 file), for namespace name.
func (t *topo) agentSpec(name string, backend config.Backend, mtu int, keyFile string) (*config.Spec, error) {
	c := &config.Config{
		Name:    name,
		Backend: string(backend),
		WireGuard: config.WireGuard{
			PrivateKeyFile: keyFile,
			Addresses:      []string{tunnelAgent + "/32"},
			MTU:            mtu,
			Peers: []config.Peer{{
				PublicKey:  t.PeerKey.PublicKey().String(),
				Endpoint:   fmt.Sprintf("%s:%d", underlayPeer, peerPort),
				AllowedIPs: []string{"0.0.0.0/0"},
			}},
		},
		IPv6: "block",
		DNS:  config.DNS{Servers: []string{tunnelPeer}},
	}
	s, err := config.Resolve(c, config.Options{})
	if err != nil {
		return nil, fmt.Errorf("bench agent config: %w", err)
	}
	return s, nil
}

// agentUp brings the confined namespace up with engine.Up on the underlay
// thread: the tunnel's UDP socket (the birthplace trick) is opened in the
// underlay namespace, exactly as the agent opens it in the host's.
func (t *topo) agentUp(ctx context.Context, eng *engine.Engine, s *config.Spec) (*engine.Instance, error) {
	var inst *engine.Instance
	err := t.under.Do(func() error {
		var err error
		inst, err = eng.Up(ctx, s, "")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("engine up %s: %w", s.Name, err)
	}
	return inst, nil
}

// agentDown tears an instance down on the underlay thread.
func (t *topo) agentDown(eng *engine.Engine, inst *engine.Instance) error {
	return t.under.Do(func() error { return eng.Teardown(inst) })
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
