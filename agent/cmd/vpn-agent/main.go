// Command vpn-agent confines services to a WireGuard tunnel inside a
// network namespace with an nftables kill switch. See agent/cli.
package main

import (
	"os"

	"github.com/vpn-confinement/vpn-confinement/agent/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
