package engine

import (
	"errors"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.org/x/sys/unix"
)

// The engine's whole use of the policy package. There is deliberately no
// function that removes the namespace's kill switch: it goes only with the
// namespace.

// applyPolicy loads the kill switch. In a namespace this process just
// created the table cannot exist, and Create skips the delete that an
// atomic replace needs (and the RCU grace period it costs); if the table is
// there anyway, the atomic replace runs instead.
func applyPolicy(fw firewall, s *config.Spec, fresh bool) error {
	r := policy.Compile(s)
	if fresh {
		err := fw.Create(r, names.Netns(s.Name))
		if !errors.Is(err, unix.EEXIST) {
			return err
		}
	}
	return fw.Apply(r, names.Netns(s.Name))
}

func applyHostPolicy(fw firewall, s *config.Spec) error {
	return fw.Apply(policy.CompileHost(s), "")
}

func removeHostPolicy(fw firewall, name string) error {
	return fw.Remove("", names.HostTable(name))
}
