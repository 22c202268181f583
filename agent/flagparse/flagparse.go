// Package flagparse parses a command line whose flags may stand anywhere
// (`status NAME --json` as well as `status --json NAME`), as vpn-agent's
// and vpn-bench's commands take them.
package flagparse

import (
	"flag"
	"io"
)

// Interleaved parses args into fs, flags anywhere and everything after
// "--" positional, so that fs.Args() holds the positional arguments in
// order. It returns fs.Parse's error: flag.ErrHelp for -h/--help. fs
// prints nothing itself: the caller reports errors and help.
func Interleaved(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...) // after "--": all positional
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}
