package engine

import (
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// The engine's whole use of the policy package.

func applyPolicy(s *config.Spec) error {
	return policy.Apply(policy.Compile(s), netns.Path(s.Name))
}

func applyHostPolicy(s *config.Spec) error {
	return policy.Apply(policy.CompileHost(s), "")
}

func removeHostPolicy(name string) error {
	return policy.Remove("", policy.HostTableName(name))
}
