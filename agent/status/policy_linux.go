package status

import (
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// inspectPolicy reads the kill switch back from the kernel: whether it is
// loaded, whether it is exactly what the config compiles to, its rule
// count and its drop counters.
func inspectPolicy(r *Report, spec *config.Spec) {
	st, err := policy.Inspect(names.Netns(r.Name), names.Table)
	if err != nil || !st.Loaded {
		r.Problems = append(r.Problems, "kill-switch table is NOT loaded")
		return
	}
	r.Policy.Loaded = true
	r.Policy.Rules = st.RuleCount()
	r.Policy.Drops = map[string]uint64{}
	for _, c := range st.Counters {
		r.Policy.Drops[c.Name] = c.Packets
	}
	if spec != nil {
		if err := st.Verify(policy.Compile(spec)); err != nil {
			r.Problems = append(r.Problems, "kill-switch table was changed: "+err.Error())
		} else {
			r.Policy.Matches = true
		}
	}
}
