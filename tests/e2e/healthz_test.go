package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// healthzSite is a pool site whose agent serves metrics on a unix socket.
type healthzSite struct {
	*poolSite
	client *http.Client
}

func newHealthzSite(t *testing.T, files func(p *harness.Pool) []string, probe bool) *healthzSite {
	sock := filepath.Join(testenv.RootDir(t), "m.sock") // root's alone, as metrics.listen requires (not /tmp)
	s := newPoolSite(t, "", files, func(c *config.Config) {
		if probe {
			withProbe(c)
		} else {
			noProbe(c)
		}
		c.Metrics.Listen = "unix:" + sock
	})
	s.run(t)
	return &healthzSite{s, &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
}

// agree waits (bounded) until status exits rc in the state what matches,
// then until /healthz answers code with want in its body (it may lag
// status by a check).
func (s *healthzSite) agree(t *testing.T, phase string, rc int, what func(map[string]any) bool, code int, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var got int
	var m map[string]any
	for {
		if got, m = s.status(t); got == rc && what(m) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status exits %d (want %d): tunnel %v problems %v\nagent:\n%s", phase, got, rc, m["tunnel"], m["problems"], s.d.Output())
		}
		time.Sleep(250 * time.Millisecond)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		c, body := httpGet(t, s.client, "http://agent/healthz")
		if c == code && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: status exits %d (%v), but /healthz answers %d %q", phase, rc, m["problems"], c, body)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func recovery(want string) func(map[string]any) bool {
	return func(m map[string]any) bool { return harness.JSONField(m, "tunnel", "recovery") == want }
}

// Issue 13: `status` and /healthz agree for a healthy, an idle, a failing
// over and a dead tunnel.
func TestHealthzAgreesWithStatus(t *testing.T) {
	t.Parallel()
	t.Run("failover", func(t *testing.T) {
		t.Parallel()
		s := newHealthzSite(t, both, true)
		s.mustWork(t, 10*time.Second, 0, "before")
		s.agree(t, "healthy", 0, recovery("healthy"), http.StatusOK, "ok")
		s.ProvA.Kill()
		s.agree(t, "failing over", 1, func(m map[string]any) bool {
			r := harness.JSONField(m, "tunnel", "recovery")
			return r == "retrying" || r == "failing over"
		}, http.StatusServiceUnavailable, "tunnel dead")
		s.agree(t, "on the fallback server", 0, func(m map[string]any) bool {
			i := harness.JSONField(m, "server", "index")
			return recovery("healthy")(m) && i != nil && i != float64(0)
		}, http.StatusOK, "ok")
		s.ProvB.Kill()
		s.agree(t, "every server dead", 1, recovery("every server dead"), http.StatusServiceUnavailable, "every server of the pool is dead")
		// The metric the alert VpnConfinementEveryServerDead fires on
		// (dist/prometheus/alerts.yml) says so too.
		want := fmt.Sprintf("\nvpn_confinement_recovery_state{namespace=%q,state=\"every_server_dead\"} 1\n", s.name)
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, text := httpGet(t, s.client, "http://agent/metrics")
			if strings.Contains(text, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("every server dead, but /metrics lacks %q:\n%s", strings.TrimSpace(want), text)
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		// No probe: a probe is traffic, and a tunnel with one never idles.
		s := newHealthzSite(t, func(p *harness.Pool) []string { return []string{p.FileA} }, false)
		s.mustWork(t, 10*time.Second, 0, "before")
		probe.UDPEcho(s.name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), harness.Marker("idle"))
		s.agree(t, "idle", 0, func(m map[string]any) bool { return harness.JSONField(m, "tunnel", "verdict") == "idle" }, http.StatusOK, "ok")
	})
}
