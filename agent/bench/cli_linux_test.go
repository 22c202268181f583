package bench

import (
	"bytes"
	"strings"
	"testing"
)

// TestMainUsage: help on stdout with exit 0; bad flags, values and
// arguments are one line on stderr naming the culprit, exit 2, and
// nothing runs.
func TestMainUsage(t *testing.T) {
	for _, c := range []struct {
		args   []string
		rc     int
		stdout string // substring; "" means empty
		stderr string // substring of the single line; "" means empty
	}{
		{[]string{"--help"}, ExitOK, "Usage: vpn-bench [flags]", ""},
		{[]string{"-h"}, ExitOK, "-updown-cycles", ""},
		{[]string{"-h"}, ExitOK, "[,sidecar]", ""},
		{[]string{"--modes", "tunnel,side-car"}, ExitBadInput, "", "side-car"},
		{[]string{"--bogus"}, ExitBadInput, "", "-bogus"},
		{[]string{"--samples", "x"}, ExitBadInput, "", "-samples"},
		{[]string{"--duration", "soon"}, ExitBadInput, "", "--duration"},
		{[]string{"--modes", "sideways"}, ExitBadInput, "", "sideways"},
		{[]string{"--profile", "slow"}, ExitBadInput, "", "--profile"},
		{[]string{"extra"}, ExitBadInput, "", `unexpected argument "extra"`},
		// The standby-cost workload's flags reach the options.
		{[]string{"--standby-samples", "101"}, ExitBadInput, "", "--standby-samples"},
		{[]string{"--standby-window", "5s"}, ExitBadInput, "", "--standby-window"},
		{[]string{"--standby-window", "soon"}, ExitBadInput, "", "--standby-window"},
	} {
		var out, errb bytes.Buffer
		rc := Main(c.args, &out, &errb)
		if rc != c.rc {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, rc, c.rc, errb.String())
		}
		if c.stdout == "" && out.Len() != 0 || !strings.Contains(out.String(), c.stdout) {
			t.Errorf("%v: stdout %q, want %q", c.args, out.String(), c.stdout)
		}
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		switch {
		case c.stderr == "" && errb.Len() != 0:
			t.Errorf("%v: stderr %q, want none", c.args, errb.String())
		case c.stderr != "" && (len(lines) != 1 || !strings.HasPrefix(lines[0], "vpn-bench: ") || !strings.Contains(lines[0], c.stderr)):
			t.Errorf("%v: stderr %q, want one vpn-bench line naming %q", c.args, errb.String(), c.stderr)
		}
	}
}
