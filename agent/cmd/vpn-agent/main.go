// Command vpn-agent confines services to a WireGuard tunnel inside a
// network namespace with an nftables kill switch. See agent/cli.
package main

import (
	"os"
	"runtime"

	"github.com/vpn-confinement/vpn-confinement/agent/cli"
)

// The main goroutine keeps the main thread to itself. The agent switches
// threads into other network namespaces (netns.Do) on goroutines that lock
// theirs and let it die; on the main thread, which cannot die, the runtime
// would instead park it for good, still in that namespace, and
// /proc/PID/ns/net (the main thread's) would then name the confined
// namespace: the UAPI socket's guard, which checks its peer's namespace
// there, refuses `status` and `wg show` from this process.
func init() { runtime.LockOSThread() }

func main() { os.Exit(cli.Main(os.Args[1:])) }
