package badinput

import (
	"strings"
	"testing"
)

// Issue 12.10: a unit name is never written into a generated unit unless
// it is one: a newline would add directives of the caller's choosing.
func TestUnitNamesRefused(t *testing.T) {
	host := hostNS(t)
	for _, tc := range []struct{ flag, value string }{
		{"--agent-unit", "x.service\nExecStartPre=/bin/sh -c id"},
		{"--agent-unit", "vpn-agent"},
		{"--restart-with-agent", "transmission.service,evil.service\n[Service]"},
		{"--restart-with-agent", "probe@.service"},
		{"--upholds", "probe@.service"}, // the deprecated name of --restart-with-agent
	} {
		rc, stdout, stderr := agent(t, host, "unit", "proton", tc.flag, tc.value)
		msg := strings.TrimRight(stderr, "\n")
		if rc != 2 || strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "vpn-agent: "+tc.flag+": ") {
			t.Errorf("unit %s %q: rc=%d stderr=%q stdout=%q; want one line naming %s, exit 2", tc.flag, tc.value, rc, stderr, stdout, tc.flag)
		}
		if stdout != "" {
			t.Errorf("unit %s %q printed a unit: %q", tc.flag, tc.value, stdout)
		}
	}
	// Positive control: good names give a drop-in naming them.
	for _, flag := range []string{"--restart-with-agent", "--upholds"} {
		rc, stdout, stderr := agent(t, host, "unit", "proton", flag, "transmission.service,sonarr.service")
		if rc != 0 || !strings.Contains(stdout, "\nWants=transmission.service sonarr.service\n") || strings.Contains(stdout, "Upholds=") {
			t.Errorf("control %s: rc=%d stdout=%q stderr=%q", flag, rc, stdout, stderr)
		}
	}
}
