package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Issue 12 item 8: port mappings need the host's net.ipv4.ip_forward (per
// network namespace: here the simulated host's), and no host-wide setting
// outlives the namespaces that need it. It is on while a namespace with
// port mappings is up, also after its agent crashed, and back to its
// previous value after down.
func TestHostForwardingRestored(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	host := s.tp.Host
	forward := func() string {
		out, err := harness.Output(host, "sysctl", "-n", "net.ipv4.ip_forward")
		if err != nil {
			t.Fatalf("sysctl: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// The topology's host forwards; a host that does not is what matters.
	s.tp.Exec(t, host, "sysctl", "-qw", "net.ipv4.ip_forward=0")
	t.Cleanup(func() { harness.Output(host, "sysctl", "-qw", "net.ipv4.ip_forward=1") })
	if r := inboundAllowed(s); r.Reached() {
		t.Fatalf("positive control: the mapped port answers before the agent: %v", r)
	}

	for _, how := range []string{"sigterm", "crash-then-down"} {
		d := s.run(t)
		if got := forward(); got != "1" {
			t.Errorf("%s: ip_forward=%s while port mappings are up, want 1", how, got)
		}
		// Positive control: the mapping works, so forwarding was needed.
		if r := harness.Eventually(3*time.Second, func() probe.Result { return inboundAllowed(s) }); !r.Reached() {
			t.Errorf("%s: the mapped port does not answer from the LAN: %v", how, r)
		}
		if how == "sigterm" {
			must(t, d.Stop())
		} else {
			d.Kill()
			if got := forward(); got != "1" {
				t.Errorf("after a crash: ip_forward=%s while the namespace is still up (closed), want 1 until down", got)
			}
			s.ag.MustCmd(t, "down", s.name)
		}
		if got := forward(); got != "0" {
			t.Errorf("%s: ip_forward=%s after the namespace went, want the previous 0", how, got)
		}
	}
}
