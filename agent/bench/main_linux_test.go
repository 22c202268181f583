package bench

import (
	"os"
	"runtime"
	"testing"
)

// As agent/cmd/vpn-bench: re-executed as the agent, keep the main thread.
func init() {
	if os.Getenv(RoleEnv) == RoleAgent {
		runtime.LockOSThread()
	}
}

// TestMain lets the test binary act as the bench's helper processes: the
// bench re-executes /proc/self/exe with RoleEnv set, which in a test run is
// this binary.
func TestMain(m *testing.M) {
	if role := os.Getenv(RoleEnv); role != "" {
		os.Exit(RunRole(role, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}
