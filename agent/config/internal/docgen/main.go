// Command docgen writes docs/config.md from agent/config's doc comments
// (go generate ./agent/config).
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("o", "", "output file")
	dir := flag.String("dir", ".", "the config package's directory")
	flag.Parse()
	b, err := Render(*dir)
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "docgen: %v\n", err)
		os.Exit(1)
	}
}
