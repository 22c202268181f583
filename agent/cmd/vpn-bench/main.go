// Command vpn-bench measures what the tunnel and the kill switch cost, in
// a private topology it builds and removes again. See agent/bench.
package main

import (
	"os"

	"github.com/vpn-confinement/vpn-confinement/agent/bench"
)

func main() { os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr)) }
