package engine

import (
	"errors"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.org/x/sys/unix"
)

// The engine's whole use of the policy package.

// applyPolicy loads the kill switch. In a namespace this process just
// created the table cannot exist, and policy.Create skips the delete that an
// atomic replace needs (and the RCU grace period it costs); if the table is
// there anyway, the atomic replace runs instead.
func applyPolicy(s *config.Spec, fresh bool) error {
	r := policy.Compile(s)
	if fresh {
		err := policy.Create(r, names.Netns(s.Name))
		if !errors.Is(err, unix.EEXIST) {
			return err
		}
	}
	return policy.Apply(r, names.Netns(s.Name))
}

func applyHostPolicy(s *config.Spec) error {
	return policy.Apply(policy.CompileHost(s), "")
}

func removeHostPolicy(name string) error {
	return policy.Remove("", names.HostTable(name))
}
