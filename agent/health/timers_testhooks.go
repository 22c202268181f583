//go:build vpnagent_testhooks

package health

import (
	"os"
	"time"
)

// For the end-to-end tests only: in a build with -tags vpnagent_testhooks
// and VPN_AGENT_TEST_HOOKS=1, VPN_AGENT_TEST_REKEY_AFTER and
// VPN_AGENT_TEST_REJECT_AFTER (durations) lower the handshake timers, so
// that a test need not wait 180 s. Production builds have no such seam.
func init() {
	if os.Getenv("VPN_AGENT_TEST_HOOKS") != "1" {
		return
	}
	if d, err := time.ParseDuration(os.Getenv("VPN_AGENT_TEST_REKEY_AFTER")); err == nil {
		rekeyAfter = d
	}
	if d, err := time.ParseDuration(os.Getenv("VPN_AGENT_TEST_REJECT_AFTER")); err == nil {
		rejectAfter = d
	}
}
