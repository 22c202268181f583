package health

import (
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// inspectPolicy reads the kill switch back from the kernel: whether it is
// loaded, whether it is exactly what the spec compiles to (when known),
// its rule count and its drop counters.
func inspectPolicy(r *Report, s *config.Spec, fwd policy.Forwarded) {
	st, err := policy.Inspect(names.Netns(r.Name), names.Table)
	if err != nil || !st.Loaded {
		r.Add(PolicyMissing, "kill-switch table is NOT loaded")
		return
	}
	r.Policy.Loaded = true
	r.Policy.Rules = st.RuleCount()
	r.Policy.Drops = map[string]uint64{}
	for _, c := range st.Counters {
		r.Policy.Drops[c.Name] = c.Packets
	}
	if s == nil {
		return
	}
	if err := st.Verify(policy.Compile(s).WithForwarded(fwd)); err != nil {
		r.Add(PolicyChanged, "kill-switch table was changed: %v", err)
		return
	}
	r.Policy.Matches = true
}

// hostPolicyMatches reports whether the host table of s's host link is
// loaded and identical to what s compiles to.
func hostPolicyMatches(s *config.Spec) (bool, error) {
	want := policy.CompileHost(s)
	st, err := policy.Inspect("", want.Name)
	if err != nil || !st.Loaded {
		return false, err
	}
	return st.Verify(want) == nil, nil
}
