package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
	"github.com/vpn-confinement/vpn-confinement/agent/status"
)

// status's text shows the forwarded port, its state and what is pending.
func TestPrintReportPortForward(t *testing.T) {
	exp := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		pf   portforward.Status
		want []string
	}{
		{portforward.Status{State: portforward.StateMapped, Gateway: "10.2.0.1", Port: 40000, Protocols: []string{"tcp", "udp"}, Expires: exp},
			[]string{"  forwarded:  40000 (tcp, udp, lease until 2026-12-01T14:00:00Z), mapped via 10.2.0.1\n"}},
		{portforward.Status{State: portforward.StateMapped, Gateway: "192.168.1.1", Port: 6881, ExternalPort: 50000, Protocols: []string{"tcp"}, Pending: []string{"qbittorrent: connection refused"}},
			[]string{"6881 (tcp, public port 50000)", "  push:       qbittorrent: connection refused\n"}},
		{portforward.Status{State: portforward.StateNotAnswering, Gateway: "10.2.0.1", Error: "map udp: no response"},
			[]string{"  forwarded:  none, gateway not answering via 10.2.0.1: map udp: no response\n"}},
	} {
		var b strings.Builder
		printReport(&b, &status.Report{Name: "proton", PortForward: &tc.pf, ForwardedPort: tc.pf.Port})
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("status text lacks %q:\n%s", w, b.String())
			}
		}
	}
	var b strings.Builder
	printReport(&b, &status.Report{Name: "plain"})
	if strings.Contains(b.String(), "forwarded:") {
		t.Errorf("a namespace without port forwarding shows a forwarded line:\n%s", b.String())
	}
}

// getAll keeps the order of the names whatever order the workers finish in.
func TestGetAllKeepsOrder(t *testing.T) {
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("nope%d", i))
	}
	names[7] = "Bad/Name"
	reports, errs := getAll(names)
	for i, err := range errs {
		switch {
		case reports[i] != nil:
			t.Fatalf("%s: a report for a namespace that does not exist", names[i])
		case i == 7 && (err == nil || errors.Is(err, os.ErrNotExist)):
			t.Fatalf("%s: %v, want the name's validation error", names[i], err)
		case i != 7 && !errors.Is(err, os.ErrNotExist):
			t.Fatalf("%s: %v, want not exist", names[i], err)
		}
	}
}

// status's text names the standby: with health.standby off, none for the
// reason "off" (as the daemon records it); the control, a warm one.
func TestPrintReportStandby(t *testing.T) {
	for _, tc := range []struct {
		sb   engine.StandbyRecord
		want string
	}{
		{engine.StandbyRecord{Index: -1, State: "none", Why: "off"}, "  standby:    none: off\n"},
		{engine.StandbyRecord{Index: 1, State: "warm", ConfigFile: "/etc/b.conf", Endpoint: "192.0.2.2:51820"}, "  standby:    2 of 2, /etc/b.conf, endpoint 192.0.2.2:51820, warm\n"},
	} {
		var b strings.Builder
		sb := tc.sb
		printReport(&b, &status.Report{Name: "pool", Server: &status.Server{Pool: 2}, Tunnel: &engine.Liveness{Recovery: "healthy", Verdict: "alive", Standby: &sb}})
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("status text lacks %q:\n%s", tc.want, b.String())
		}
	}
}
