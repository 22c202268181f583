package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 13 end-to-end: metrics.listen in the simulated host namespace.
// /healthz agrees with `vpn-agent status --json` for a healthy and an
// unhealthy namespace, and a real Prometheus server scrapes the agent.

const (
	metricsAddr = "127.0.0.1:9586" // in the simulated host namespace
	promAddr    = "127.0.0.1:9090"
)

// hostClient is an HTTP client whose connections are made in network
// namespace ns.
func hostClient(ns string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := testbed.Do(ns, func() (err error) {
				c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

func httpGet(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp.StatusCode, string(b)
}

// statusProblems runs `status --json` and returns its healthy flag and
// problems (it exits non-zero when unhealthy, with the JSON on stdout).
func statusProblems(t *testing.T, c *confined) (bool, []string) {
	t.Helper()
	o := c.ag.Cmd("status", c.name, "--json")
	var st struct {
		Healthy  bool     `json:"healthy"`
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal([]byte(o.Stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, o.String())
	}
	return st.Healthy, st.Problems
}

func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

func TestAgentMetrics(t *testing.T) {
	t.Parallel()
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (Debian package prometheus; scripts/deps.sh installs it)")
	}
	c := newConfined(t, harness.AgentOptions{Edit: func(cfg *config.Config) { cfg.Metrics.Listen = metricsAddr }})
	// A slow watchdog, so that a problem stays until status has seen it;
	// /healthz shows what the latest check found (it repairs right after).
	c.d = c.ag.Run(t, c.path, "--check-interval", "3s")
	hc := hostClient(c.tp.Host)
	base := "http://" + metricsAddr

	// Healthy: both say so.
	if code, body := httpGet(t, hc, base+"/readyz"); code != 200 {
		t.Errorf("/readyz after READY=1: %d %q", code, body)
	}
	// /healthz shows the latest check, up to one interval old (the first
	// may predate the first handshake): wait for both to say healthy.
	deadline := time.Now().Add(15 * time.Second)
	for {
		healthy, probs := statusProblems(t, c)
		code, body := httpGet(t, hc, base+"/healthz")
		if healthy && code == 200 && body == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not both healthy within 15s of READY=1: status %v %q, /healthz %d %q", healthy, probs, code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, text := httpGet(t, hc, base+"/metrics")
	for _, want := range []string{
		fmt.Sprintf("vpn_confinement_up{namespace=%q} 1\n", c.name),
		"vpn_confinement_killswitch_packets_total{counter=",
		"vpn_confinement_tunnel_receive_bytes_total{",
		"vpn_confinement_probes_early_total{",
		fmt.Sprintf("vpn_confinement_recovery_state{namespace=%q,state=\"healthy\"} 1\n", c.name),
		fmt.Sprintf("vpn_confinement_server_info{config_file=\"\",endpoint=%q,namespace=%q} 1\n", c.cfg.WireGuard.Peers[0].Endpoint, c.name),
	} {
		if code != 200 || !strings.Contains(text, want) {
			t.Errorf("/metrics (%d) lacks %q:\n%s", code, want, text)
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("promtool check metrics on the agent's exposition: %v\n%s", err, out)
		}
	}
	key, _ := os.ReadFile(c.cfg.WireGuard.PrivateKeyFile)
	if k := strings.TrimSpace(string(key)); k == "" || strings.Contains(text, k) {
		t.Fatalf("the exposition holds the private key (or none was read)")
	}

	// Unhealthy: the kill switch deleted. status sees it at once; /healthz
	// after the next check (which then repairs it). Retried if the
	// watchdog's check fell between the deletion and status.
	var probs []string
	for try := 0; try < 3 && probs == nil; try++ {
		if _, err := harness.Output(c.name, "nft", "delete", "table", "inet", names.Table); err != nil {
			t.Fatalf("removing the kill switch: %v", err)
		}
		if healthy, p := statusProblems(t, c); !healthy {
			probs = p
		} else {
			time.Sleep(4 * time.Second) // repaired already; wait for /healthz to settle
		}
	}
	if !slices.Contains(probs, "kill-switch table is NOT loaded") {
		t.Fatalf("status after deleting the kill switch: %q", probs)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		code, body := httpGet(t, hc, base+"/healthz")
		if code == 503 {
			if got := lines(body); !slices.Equal(got, probs) {
				t.Errorf("/healthz problems %q, status's %q", got, probs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d %q 10s after status found %q", code, body, probs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Repaired: healthy again on both sides, and counted.
	deadline = time.Now().Add(15 * time.Second)
	for {
		code, _ := httpGet(t, hc, base+"/healthz")
		healthy, p := statusProblems(t, c)
		if code == 200 && healthy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not healthy again after the repair: /healthz %d, status %q", code, p)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, text := httpGet(t, hc, base+"/metrics"); strings.Contains(text, fmt.Sprintf("vpn_confinement_repairs_total{kind=\"policy_missing\",namespace=%q} 0\n", c.name)) {
		t.Errorf("the kill-switch repair is not counted:\n%s", text)
	}

	// A real Prometheus server scrapes the agent, as the job the shipped
	// alert rules expect, with those rules loaded (when the source tree is
	// there: not in the VM tier's prebuilt test binary).
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	rules, alerts := "", 0
	if root, err := moduleRoot(); err == nil {
		f := filepath.Join(root, "dist", "prometheus", "alerts.yml")
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		alerts = strings.Count(string(b), "\n      - alert: ")
		rules = fmt.Sprintf("rule_files: [%q]\n", f)
	} else {
		t.Logf("the alert rules are not loaded: %v", err)
	}
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
%sscrape_configs:
  - job_name: vpn-confinement
    static_configs:
      - targets: [%q]
`, rules, metricsAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd := exec.Command("nsenter", "--net="+names.Netns(c.tp.Host), prom,
		"--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline = time.Now().Add(60 * time.Second)
	for {
		var r struct {
			Data struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		last, ok := promAPI(hc, "/api/v1/query?query="+url.QueryEscape("vpn_confinement_up"), &r)
		if ok && len(r.Data.Result) > 0 {
			res := r.Data.Result[0]
			if res.Metric["namespace"] != c.name || res.Value[1] != "1" || len(r.Data.Result) != 1 {
				t.Fatalf("Prometheus answers %s, want vpn_confinement_up{namespace=%q} 1", last, c.name)
			}
			t.Logf("Prometheus: %s", last)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has no vpn_confinement_up after 60s; last answer %s\nprometheus output:\n%s", last, out.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if alerts > 0 {
		promRulesEvaluate(t, hc, alerts, &out)
	}
}

// promAPI GETs path of the Prometheus API (at promAddr) into v. It
// returns the answer (or the error) as text, and whether v holds an
// answer of status "success".
func promAPI(hc *http.Client, path string, v any) (string, bool) {
	resp, err := hc.Get("http://" + promAddr + path)
	if err != nil {
		return err.Error(), false
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st struct {
		Status string `json:"status"`
	}
	return string(b), json.Unmarshal(b, &st) == nil && st.Status == "success" && json.Unmarshal(b, v) == nil
}

// promRulesEvaluate waits until Prometheus has evaluated the shipped
// alert rules (want of them) over the agent's series with neither agent
// alert pending or firing (so the job it scrapes is the one the rules
// select: else VpnConfinementAgentAbsent stays pending), then checks
// every rule's health is "ok".
func promRulesEvaluate(t *testing.T, hc *http.Client, want int, out fmt.Stringer) {
	t.Helper()
	type rule struct {
		Name           string `json:"name"`
		Health         string `json:"health"`
		State          string `json:"state"`
		LastError      string `json:"lastError"`
		LastEvaluation string `json:"lastEvaluation"`
	}
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for ; ; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has not evaluated %d alert rules in good health within 30s; last answer %s\nprometheus output:\n%s", want, last, out)
		}
		var r struct {
			Data struct {
				Groups []struct {
					Rules []rule `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		var ok bool
		if last, ok = promAPI(hc, "/api/v1/rules?type=alert", &r); !ok {
			continue
		}
		var rs []rule
		for _, g := range r.Data.Groups {
			rs = append(rs, g.Rules...)
		}
		// Evaluated, and after the first scrape (before it, the agent
		// alerts may be pending: no up series yet).
		settled := len(rs) == want
		for _, x := range rs {
			if x.LastEvaluation == "" || strings.HasPrefix(x.LastEvaluation, "0001-") || x.Health == "unknown" {
				settled = false
			}
			if (x.Name == "VpnConfinementAgentDown" || x.Name == "VpnConfinementAgentAbsent") && x.State != "inactive" {
				settled = false
			}
		}
		if !settled {
			continue
		}
		for _, x := range rs {
			if x.Health != "ok" || x.LastError != "" {
				t.Errorf("alert rule %s: health %q, error %q", x.Name, x.Health, x.LastError)
			}
		}
		t.Logf("Prometheus evaluated %d alert rules, all in good health", len(rs))
		return
	}
}

// TestAgentMetricsListenInUse: a taken metrics.listen address fails run
// at once with one line naming the field, exit 2, nothing left up.
func TestAgentMetricsListenInUse(t *testing.T) {
	t.Parallel()
	c := newConfined(t, harness.AgentOptions{Edit: func(cfg *config.Config) { cfg.Metrics.Listen = metricsAddr }})
	var ln net.Listener
	if err := testbed.Do(c.tp.Host, func() (err error) { ln, err = net.Listen("tcp", metricsAddr); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := c.ag.Start(c.path)
	if err == nil {
		d.Stop()
		t.Fatal("run became ready with metrics.listen in use")
	}
	if !strings.Contains(err.Error(), "exit status 2") {
		t.Errorf("run with metrics.listen in use: %v, want exit 2", err)
	}
	if want := "vpn-agent: metrics.listen: cannot listen on " + metricsAddr + ": address already in use"; !strings.Contains(err.Error(), want+";") {
		t.Errorf("run's error lacks the one line %q:\n%v", want, err)
	}
	if harness.Mounted(c.name) {
		t.Errorf("namespace %s is up after the failed run", c.name)
	}
	// up's detached agent meets the same: up reports it as bad input too.
	o := c.ag.Cmd("up", "--config", c.path)
	if o.ExitCode() != 2 || !strings.HasPrefix(strings.TrimSpace(o.Stderr), "vpn-agent: metrics.listen: cannot listen on "+metricsAddr) || strings.Count(strings.TrimSpace(o.Stderr), "\n") != 0 {
		t.Errorf("up with metrics.listen in use: %v; want exit 2 and one line naming metrics.listen", o)
	}
	if harness.Mounted(c.name) {
		t.Errorf("namespace %s is up after the failed up", c.name)
	}
}

// TestAgentMetricsUnixUp: `up`'s detached agent serves metrics on a unix
// socket (mode 0660) and removes it at down.
func TestAgentMetricsUnixUp(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(testenv.RootDir(t), "metrics", "agent.sock") // root's alone, as metrics.listen requires (not /tmp)
	c := newConfined(t, harness.AgentOptions{Edit: func(cfg *config.Config) { cfg.Metrics.Listen = "unix:" + sock }})
	out := c.ag.MustCmd(t, "up", "--config", c.path)
	pid := upPID(out.Stdout)
	t.Cleanup(func() { killStray(t, pid) })
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Fatalf("metrics socket after up: %v %v, want a socket of mode 0660", fi, err)
	}
	uc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	if code, body := httpGet(t, uc, "http://agent/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz over the socket after up: %d %q", code, body)
	}
	if code, text := httpGet(t, uc, "http://agent/metrics"); code != 200 || !strings.Contains(text, fmt.Sprintf("vpn_confinement_server_info{config_file=\"\",endpoint=%q,namespace=%q} 1", c.cfg.WireGuard.Peers[0].Endpoint, c.name)) {
		t.Errorf("/metrics over the socket: %d\n%s", code, text)
	}
	c.ag.MustCmd(t, "down", c.name)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("metrics socket left after down: %v", err)
	}
}
