// Command vpn-bench measures what the tunnel and the kill switch cost, in
// a private topology it builds and removes again. See agent/bench.
package main

import (
	"os"
	"runtime"

	"github.com/vpn-confinement/vpn-confinement/agent/bench"
)

// Re-executed as the agent (the failover workload's `vpn-agent run`), the
// main goroutine keeps the main thread, as vpn-agent's main does (see
// agent/cmd/vpn-agent).
func init() {
	if os.Getenv(bench.RoleEnv) == bench.RoleAgent {
		runtime.LockOSThread()
	}
}

func main() { os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr)) }
