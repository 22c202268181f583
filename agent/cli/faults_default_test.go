//go:build !vpnagent_testhooks

package cli

import "testing"

// TestNoFaultHookInProduction: without -tags vpnagent_testhooks the
// environment cannot make the agent fail or kill itself.
func TestNoFaultHookInProduction(t *testing.T) {
	t.Setenv("VPN_AGENT_TEST_HOOKS", "1")
	t.Setenv("VPN_AGENT_FAIL_AFTER", "netns")
	t.Setenv("VPN_AGENT_KILL_AFTER", "link")
	if faultHook() != nil {
		t.Fatal("faultHook() is not nil in a build without the vpnagent_testhooks tag")
	}
	if e := newEngine(nil); e.AfterStep != nil {
		t.Fatal("the engine has an AfterStep hook in a production build")
	}
	if buildNote != "" {
		t.Fatalf("buildNote %q in a production build", buildNote)
	}
}
