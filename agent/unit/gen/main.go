// Command gen writes the files package unit generates (run by `go generate
// ./agent/unit`): the dist/systemd units and nix/units.json.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/vpn-confinement/vpn-confinement/agent/unit"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	files := unit.Files()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := os.WriteFile(filepath.Join(*root, p), files[p], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
