package metrics

import (
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
)

// numKinds bounds the health.Kind values counted (repairable ones are
// all below it).
const numKinds = int(health.ConfigUnreadable) + 1

// kindNames are the repairs_total kind label values: the problems the
// daemon repairs. Problems nothing repairs (a stale handshake, an
// unreadable namespace, status-only ones) are not counted.
var kindNames = map[health.Kind]string{
	health.NamespaceMissing:  "namespace_missing",
	health.PolicyMissing:     "policy_missing",
	health.PolicyChanged:     "policy_changed",
	health.TunnelMissing:     "tunnel_missing",
	health.DataPlaneDead:     "data_plane_dead",
	health.HostLinkMissing:   "host_link_missing",
	health.HostPolicyMissing: "host_policy_missing",
	health.RoutesWrong:       "routes_wrong",
}

func repairable(k health.Kind) bool {
	_, ok := kindNames[k]
	return ok && int(k) >= 0 && int(k) < numKinds
}

// recoveryStates are the recovery_state state label values, one per
// liveness.State, in the order the series are exposed. Spaces become
// underscores: the values name states, they are not prose.
var recoveryStates = []struct {
	state liveness.State
	label string
}{
	{liveness.Healthy, "healthy"},
	{liveness.Retrying, "retrying"},
	{liveness.FailingOver, "failing_over"},
	{liveness.AllDead, "every_server_dead"},
}
