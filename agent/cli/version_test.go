package cli

import (
	"runtime/debug"
	"testing"
)

// Issue 21.7e: a plain `go build` of a checkout says which commit it is.
func TestVersionOf(t *testing.T) {
	const rev = "8e73c65f0123456789abcdef0123456789abcdef"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	mod := func(v string) debug.Module { return debug.Module{Version: v} }
	for _, c := range []struct {
		v    string
		bi   *debug.BuildInfo
		want string
	}{
		{"dev", &debug.BuildInfo{Main: mod("(devel)"), Settings: vcs("false")}, "dev-8e73c65f0123"}, // Go before 1.24
		{"dev", &debug.BuildInfo{Main: mod("(devel)"), Settings: vcs("true")}, "dev-8e73c65f0123-dirty"},
		{"dev", &debug.BuildInfo{Main: mod("v0.0.0-20261201233846-8e73c65f0123"), Settings: vcs("false")}, "dev-8e73c65f0123"}, // Go 1.24+
		{"dev", &debug.BuildInfo{Main: mod("v0.0.0-20261201233846-8e73c65f0123+dirty"), Settings: vcs("true")}, "dev-8e73c65f0123-dirty"},
		{"dev", &debug.BuildInfo{Main: mod("v1.2.0+dirty"), Settings: vcs("true")}, "dev-8e73c65f0123-dirty"},
		{"dev", &debug.BuildInfo{Main: mod("v1.2.0"), Settings: vcs("false")}, "v1.2.0"},                                 // a clean release tag
		{"1.4.0", &debug.BuildInfo{Main: mod("(devel)"), Settings: vcs("true")}, "1.4.0"},                                // -ldflags wins
		{"dev", &debug.BuildInfo{Main: mod("v0.0.0-20260101000000-abcdefabcdef")}, "v0.0.0-20260101000000-abcdefabcdef"}, // go install m@v
		{"dev", &debug.BuildInfo{Main: mod("(devel)")}, "dev"},                                                           // no VCS (a tarball, -buildvcs=false)
		{"dev", nil, "dev"},
	} {
		if got := versionOf(c.v, c.bi); got != c.want {
			t.Errorf("versionOf(%q, %+v) = %q, want %q", c.v, c.bi, got, c.want)
		}
	}
}
