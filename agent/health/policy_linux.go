package health

import (
	"errors"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// policyMatches reports whether the namespace's kill-switch table is
// loaded and identical to what the spec compiles to. err: not loaded.
func policyMatches(s *config.Spec) (bool, error) {
	return matches(names.Netns(s.Name), policy.Compile(s))
}

func hostPolicyMatches(s *config.Spec) (bool, error) {
	return matches("", policy.CompileHost(s))
}

func matches(nsPath string, want *policy.Ruleset) (bool, error) {
	st, err := policy.Inspect(nsPath, want.Name)
	if err != nil {
		return false, err
	}
	if !st.Loaded {
		return false, errors.New("table " + want.Name + " is not loaded")
	}
	return st.Verify(want) == nil, nil
}
