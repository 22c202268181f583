package metrics

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
)

func fakeSpec(t *testing.T) (*config.Spec, string) {
	t.Helper()
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	a := &config.Spec{Name: "proton", PrivateKey: key, Peers: []config.PeerSpec{{PublicKey: key.PublicKey(), Endpoint: "198.51.100.1:51820"}}}
	b := &config.Spec{Name: "proton", PrivateKey: key, Server: 1, Peers: []config.PeerSpec{{PublicKey: key.PublicKey(), Endpoint: "198.51.100.2:51820"}}}
	a.Pool, b.Pool = []*config.Spec{a, b}, []*config.Spec{a, b}
	return a, key.String()
}

func healthyReport() *health.Report {
	hs := time.Unix(1700000000, 500_000_000)
	return &health.Report{
		Name: "proton", Interface: "wg-proton", Namespace: true,
		Link:   health.Link{Present: true, Up: true},
		Policy: health.Policy{Loaded: true, Matches: true, Drops: map[string]uint64{"drop_out": 7, "drop_in": 3}},
		Peers:  []health.Peer{{Endpoint: "198.51.100.1:51820", LatestHandshake: &hs, RxBytes: 1000, TxBytes: 200}, {RxBytes: 5, TxBytes: 6}},
	}
}

func exposition(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

func TestCollector(t *testing.T) {
	s, key := fakeSpec(t)
	m := New(s)
	m.Publish(healthyReport())
	m.Repaired(health.PolicyMissing)
	m.Repaired(health.PolicyMissing)
	m.Repaired(health.HandshakeStale) // not repairable: not counted
	m.ProbeFailed()
	m.ProbedEarly()
	m.ProbedEarly()
	m.FailedOver(1)

	want := `
# HELP vpn_confinement_up 1 when the latest health check of the namespace found nothing wrong, 0 otherwise (or before the first check).
# TYPE vpn_confinement_up gauge
vpn_confinement_up{namespace="proton"} 1
# HELP vpn_confinement_tunnel_last_handshake_timestamp_seconds Unix time of the latest WireGuard handshake with any peer of the tunnel (absent before the first).
# TYPE vpn_confinement_tunnel_last_handshake_timestamp_seconds gauge
vpn_confinement_tunnel_last_handshake_timestamp_seconds{namespace="proton"} 1.7000000005e+09
# HELP vpn_confinement_tunnel_receive_bytes_total Bytes received through the WireGuard tunnel, summed over its peers (resets when the tunnel is rebuilt).
# TYPE vpn_confinement_tunnel_receive_bytes_total counter
vpn_confinement_tunnel_receive_bytes_total{namespace="proton"} 1005
# HELP vpn_confinement_tunnel_transmit_bytes_total Bytes sent through the WireGuard tunnel, summed over its peers (resets when the tunnel is rebuilt).
# TYPE vpn_confinement_tunnel_transmit_bytes_total counter
vpn_confinement_tunnel_transmit_bytes_total{namespace="proton"} 206
# HELP vpn_confinement_killswitch_packets_total Packets counted by the kill switch's named nftables counters (resets when the table is replaced).
# TYPE vpn_confinement_killswitch_packets_total counter
vpn_confinement_killswitch_packets_total{counter="drop_in",namespace="proton"} 3
vpn_confinement_killswitch_packets_total{counter="drop_out",namespace="proton"} 7
# HELP vpn_confinement_failovers_total Failovers from one server of the pool to another.
# TYPE vpn_confinement_failovers_total counter
vpn_confinement_failovers_total{namespace="proton"} 1
# HELP vpn_confinement_server_info The active server: its wg-quick config file (empty for structured options) and peer endpoint(s); value 1.
# TYPE vpn_confinement_server_info gauge
vpn_confinement_server_info{config_file="",endpoint="198.51.100.2:51820",namespace="proton"} 1
# HELP vpn_confinement_probe_failures_total Failed health probes through the tunnel.
# TYPE vpn_confinement_probe_failures_total counter
vpn_confinement_probe_failures_total{namespace="proton"} 1
# HELP vpn_confinement_probes_early_total Health probes sent before their tick because the tunnel sent and received nothing for a whole check (the passive trigger; at most one per probe interval).
# TYPE vpn_confinement_probes_early_total counter
vpn_confinement_probes_early_total{namespace="proton"} 2
`
	c := collector{m}
	names := []string{"vpn_confinement_up", "vpn_confinement_tunnel_last_handshake_timestamp_seconds",
		"vpn_confinement_tunnel_receive_bytes_total", "vpn_confinement_tunnel_transmit_bytes_total",
		"vpn_confinement_killswitch_packets_total", "vpn_confinement_failovers_total",
		"vpn_confinement_server_info", "vpn_confinement_probe_failures_total", "vpn_confinement_probes_early_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "vpn_confinement_repairs_total"); n != len(kindNames) {
		t.Errorf("%d repairs_total series, want %d", n, len(kindNames))
	}

	text := exposition(t, m)
	if strings.Contains(text, key) || strings.Contains(text, s.Peers[0].PublicKey.String()) {
		t.Fatalf("the exposition holds a key:\n%s", text)
	}
	hasLines(t, text,
		`vpn_confinement_repairs_total{kind="policy_missing",namespace="proton"} 2`,
		`vpn_confinement_repairs_total{kind="tunnel_missing",namespace="proton"} 0`, // every kind from the start
	)
	if !strings.Contains(text, "go_goroutines") || !strings.Contains(text, "process_open_fds") {
		t.Error("no Go/process metrics in the exposition")
	}
}

// The forwarded port is a value, not a label; the series exist only with
// port forwarding, and the gateway's silence shows as answering 0.
func TestPortForwardMetrics(t *testing.T) {
	s, _ := fakeSpec(t)
	m := New(s)
	c := collector{m}
	if n := testutil.CollectAndCount(c, "vpn_confinement_forwarded_port"); n != 0 {
		t.Fatalf("%d forwarded_port series without port forwarding", n)
	}
	m.PortForwarded(portforward.Status{State: portforward.StateMapped, Port: 40001, Protocols: []string{"tcp", "udp"}, Requests: 4, Pending: []string{"qbittorrent: refused"}})
	want := `
# HELP vpn_confinement_forwarded_port The port the provider forwards to the namespace (NAT-PMP), open in the kill switch while its lease lives; 0 when there is none (present only with portForwarding).
# TYPE vpn_confinement_forwarded_port gauge
vpn_confinement_forwarded_port{namespace="proton"} 40001
# HELP vpn_confinement_port_forwarding_gateway_answering 1 when the NAT-PMP gateway granted the latest request, 0 when it failed or did not answer.
# TYPE vpn_confinement_port_forwarding_gateway_answering gauge
vpn_confinement_port_forwarding_gateway_answering{namespace="proton"} 1
# HELP vpn_confinement_port_forwarding_requests_total Mapping requests sent to the NAT-PMP gateway (one per protocol and renewal).
# TYPE vpn_confinement_port_forwarding_requests_total counter
vpn_confinement_port_forwarding_requests_total{namespace="proton"} 4
# HELP vpn_confinement_port_forwarding_request_failures_total Mapping requests that failed or were not answered.
# TYPE vpn_confinement_port_forwarding_request_failures_total counter
vpn_confinement_port_forwarding_request_failures_total{namespace="proton"} 0
# HELP vpn_confinement_port_forwarding_pending_pushes Applications the forwarded port is not handed to yet (retried with backoff).
# TYPE vpn_confinement_port_forwarding_pending_pushes gauge
vpn_confinement_port_forwarding_pending_pushes{namespace="proton"} 1
`
	names := []string{"vpn_confinement_forwarded_port", "vpn_confinement_port_forwarding_gateway_answering",
		"vpn_confinement_port_forwarding_requests_total", "vpn_confinement_port_forwarding_request_failures_total",
		"vpn_confinement_port_forwarding_pending_pushes"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// The gateway silent: the same series (HELP and TYPE checked above),
	// the port 0 and answering 0.
	m.PortForwarded(portforward.Status{State: portforward.StateNotAnswering, Requests: 9, Failures: 5, Error: "map udp: timeout"})
	hasLines(t, exposition(t, m),
		`vpn_confinement_forwarded_port{namespace="proton"} 0`,
		`vpn_confinement_port_forwarding_gateway_answering{namespace="proton"} 0`,
		`vpn_confinement_port_forwarding_requests_total{namespace="proton"} 9`,
		`vpn_confinement_port_forwarding_request_failures_total{namespace="proton"} 5`,
		`vpn_confinement_port_forwarding_pending_pushes{namespace="proton"} 0`,
	)
	if n := testutil.CollectAndCount(c, names...); n != len(names) {
		t.Errorf("%d port-forwarding series with the gateway silent, want %d", n, len(names))
	}
}

// hasLines fails t for each of lines that is not a whole line of text.
func hasLines(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains("\n"+text, "\n"+l+"\n") {
			t.Errorf("no line %s in:\n%s", l, text)
		}
	}
}

func TestUnhealthyAndBeforeFirstCheck(t *testing.T) {
	s, _ := fakeSpec(t)
	m := New(s)
	if code, body := m.Healthz(); code != 503 || !strings.Contains(body, "no health check") {
		t.Errorf("before the first report: %d %q", code, body)
	}
	text := exposition(t, m)
	if !strings.Contains(text, `vpn_confinement_up{namespace="proton"} 0`) {
		t.Errorf("up before the first report is not 0:\n%s", text)
	}
	if strings.Contains(text, "vpn_confinement_tunnel_receive_bytes_total") {
		t.Error("tunnel bytes exposed without a report")
	}
	r := &health.Report{Name: "proton", Namespace: true}
	r.Add(health.PolicyMissing, "kill-switch table is NOT loaded")
	r.Add(health.TunnelMissing, "interface wg-proton missing in namespace proton: no tunnel (traffic is blocked)")
	m.Publish(r)
	if !strings.Contains(exposition(t, m), `vpn_confinement_up{namespace="proton"} 0`) {
		t.Error("up is not 0 for an unhealthy report")
	}
}

func TestHTTP(t *testing.T) {
	s, _ := fakeSpec(t)
	m := New(s)
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); path != "/metrics" && !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("%s: Content-Type %q", path, ct)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "not up") {
		t.Errorf("/readyz before Ready: %d %q", code, body)
	}
	m.Ready()
	if code, body := get("/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz after Ready: %d %q", code, body)
	}
	m.Publish(healthyReport())
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz healthy: %d %q", code, body)
	}
	r := &health.Report{Name: "proton", Namespace: true}
	r.Add(health.PolicyMissing, "kill-switch table is NOT loaded")
	r.Add(health.RoutesWrong, "default route through the tunnel is missing")
	m.Publish(r)
	want := "kill-switch table is NOT loaded\ndefault route through the tunnel is missing\n"
	if code, body := get("/healthz"); code != 503 || body != want {
		t.Errorf("/healthz unhealthy: %d %q, want 503 %q", code, body, want)
	}
	if code, _ := get("/nope"); code != 404 {
		t.Errorf("/nope: %d", code)
	}
}

func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus; scripts/deps.sh installs it): exposition not checked")
	}
	s, _ := fakeSpec(t)
	m := New(s)
	r := healthyReport()
	m.Publish(r)
	m.Repaired(health.TunnelMissing)
	m.PortForwarded(portforward.Status{State: portforward.StateMapped, Port: 40001, Requests: 2})
	text := exposition(t, m)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// Issue 25: the standby's peer is left out of the tunnel's handshake and
// byte counts and has a handshake gauge of its own; the daemon's view of
// the standby is exported.
func TestStandbyMetrics(t *testing.T) {
	s, _ := fakeSpec(t)
	m := New(s)
	r := healthyReport()
	later := r.Peers[0].LatestHandshake.Add(time.Minute)
	r.Peers = append(r.Peers, health.Peer{Standby: true, LatestHandshake: &later, RxBytes: 1 << 20, TxBytes: 1 << 20})
	m.Publish(r)
	m.SetStandby(&Standby{Server: 1, Warm: true, MovesBack: 2})
	text := exposition(t, m)
	hasLines(t, text,
		`vpn_confinement_tunnel_last_handshake_timestamp_seconds{namespace="proton"} 1.7000000005e+09`,
		`vpn_confinement_tunnel_receive_bytes_total{namespace="proton"} 1005`,
		`vpn_confinement_standby_last_handshake_timestamp_seconds{namespace="proton"} 1.7000000605e+09`,
		`vpn_confinement_standby_server{namespace="proton"} 1`,
		`vpn_confinement_standby_warm{namespace="proton"} 1`,
		`vpn_confinement_moves_back_total{namespace="proton"} 2`)
}

// The failover loop's state is a state set: absent before the loop says
// anything, then one series per state, 1 for the current one.
func TestRecoveryState(t *testing.T) {
	s, _ := fakeSpec(t)
	m := New(s)
	c := collector{m}
	if n := testutil.CollectAndCount(c, "vpn_confinement_recovery_state"); n != 0 {
		t.Fatalf("%d recovery_state series before the first state", n)
	}
	m.Recovering(liveness.Healthy)
	m.Recovering(liveness.AllDead)
	want := `
# HELP vpn_confinement_recovery_state The failover loop's state: 1 for the current one of healthy, retrying, failing_over and every_server_dead (the pool tried in full; the namespace stays closed), 0 for the others (absent before the first check).
# TYPE vpn_confinement_recovery_state gauge
vpn_confinement_recovery_state{namespace="proton",state="every_server_dead"} 1
vpn_confinement_recovery_state{namespace="proton",state="failing_over"} 0
vpn_confinement_recovery_state{namespace="proton",state="healthy"} 0
vpn_confinement_recovery_state{namespace="proton",state="retrying"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "vpn_confinement_recovery_state"); err != nil {
		t.Error(err)
	}
	// Every state the failover loop has is one of the series, the only
	// one at 1.
	for st, label := range map[liveness.State]string{liveness.Healthy: "healthy", liveness.Retrying: "retrying",
		liveness.FailingOver: "failing_over", liveness.AllDead: "every_server_dead"} {
		m.Recovering(st)
		text := exposition(t, m)
		hasLines(t, text, `vpn_confinement_recovery_state{namespace="proton",state="`+label+`"} 1`)
		var series, set int
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "vpn_confinement_recovery_state{") {
				series++
				if strings.HasSuffix(l, " 1") {
					set++
				}
			}
		}
		if series != 4 || set != 1 {
			t.Errorf("%q: %d recovery_state series, %d of them 1; want 4 and 1", st, series, set)
		}
	}
}
