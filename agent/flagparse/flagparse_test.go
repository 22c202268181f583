package flagparse

import (
	"errors"
	"flag"
	"slices"
	"testing"
)

func TestInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args []string
		json bool
		pos  []string
	}{
		{[]string{"proton", "--json"}, true, []string{"proton"}},
		{[]string{"--json", "proton", "nl"}, true, []string{"proton", "nl"}},
		{[]string{"proton", "--", "--json", "-x"}, false, []string{"proton", "--json", "-x"}},
		{nil, false, nil},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		j := fs.Bool("json", false, "")
		if err := Interleaved(fs, tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if *j != tc.json || !(slices.Equal(fs.Args(), tc.pos) || len(tc.pos) == 0 && fs.NArg() == 0) {
			t.Errorf("%v: json=%v args=%q; want %v %q", tc.args, *j, fs.Args(), tc.json, tc.pos)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	if err := Interleaved(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	if err := Interleaved(fs, []string{"x", "--nope"}); err == nil {
		t.Error("an unknown flag passed")
	}
}
