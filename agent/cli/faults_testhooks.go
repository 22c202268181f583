//go:build vpnagent_testhooks

package cli

import (
	"errors"
	"os"
	"syscall"
)

// buildNote marks a build with the fault-injection hooks in `version`, so
// a test can tell such a binary from a production one.
const buildNote = " (test hooks)"

// faultHook is for the fault-injection tests only: it exists only in a
// build with -tags vpnagent_testhooks, and acts only when
// VPN_AGENT_TEST_HOOKS=1: VPN_AGENT_FAIL_AFTER=<step> fails Up after that
// step; VPN_AGENT_KILL_AFTER=<step> SIGKILLs the agent there.
func faultHook() func(string) error {
	if os.Getenv("VPN_AGENT_TEST_HOOKS") != "1" {
		return nil
	}
	failAt, killAt := os.Getenv("VPN_AGENT_FAIL_AFTER"), os.Getenv("VPN_AGENT_KILL_AFTER")
	return func(step string) error {
		if step == killAt {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		if step == failAt {
			return errors.New("injected fault")
		}
		return nil
	}
}
