//go:build vpnagent_testhooks

package cli

import "testing"

// TestFaultHook: with the tag, the hook acts only when VPN_AGENT_TEST_HOOKS=1
// and fails exactly after the named step.
func TestFaultHook(t *testing.T) {
	t.Setenv("VPN_AGENT_FAIL_AFTER", "b")
	t.Setenv("VPN_AGENT_TEST_HOOKS", "")
	if faultHook() != nil {
		t.Fatal("hook active without VPN_AGENT_TEST_HOOKS=1")
	}
	t.Setenv("VPN_AGENT_TEST_HOOKS", "1")
	h := faultHook()
	if h == nil {
		t.Fatal("no hook with VPN_AGENT_TEST_HOOKS=1")
	}
	if err := h("a"); err != nil {
		t.Errorf("step a: %v", err)
	}
	if err := h("b"); err == nil || err.Error() != "injected fault" {
		t.Errorf("step b: %v, want injected fault", err)
	}
	if buildNote == "" {
		t.Error("no buildNote in a test-hooks build")
	}
}
