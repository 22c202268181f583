// Command netprobe runs the leak matrix's probes (tests/internal/probe
// Specs) from the network namespace it runs in, concurrently, and prints
// their results. tests/e2e builds it static (CGO_ENABLED=0) into the root
// of a podman container, so the matrix's own probes run from inside a
// container joined to a confined namespace.
//
// Usage: netprobe SPECS, where SPECS is a JSON array of probe.Spec. It
// prints a JSON array of probe.Result in the same order and exits 0,
// whatever the probes found; 2 on a usage error.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: netprobe SPECS (a JSON array of probe specs)")
		os.Exit(2)
	}
	var specs []probe.Spec
	if err := json.Unmarshal([]byte(os.Args[1]), &specs); err != nil {
		fmt.Fprintf(os.Stderr, "netprobe: SPECS: %v (want a JSON array of probe specs)\n", err)
		os.Exit(2)
	}
	if err := json.NewEncoder(os.Stdout).Encode(probe.RunAll(probe.Here, specs...)); err != nil {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		os.Exit(1)
	}
}
